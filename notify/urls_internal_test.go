package notify

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// Every refused range is refused at creation (Check, on a literal
// address) and at dial time (control, on the address dialled), at both
// its ends; IPv6 forms that embed an IPv4 address are judged by it.
func TestURLPolicyRefusesEveryRange(t *testing.T) {
	t.Parallel()
	p := URLPolicy{}
	refused := func(t *testing.T, ip netip.Addr) {
		t.Helper()
		if err := p.Check(context.Background(), "https://"+netip.AddrPortFrom(ip, 443).String()+"/hook"); !errors.Is(err, ErrURLRefused) {
			t.Errorf("created with %s: %v", ip, err)
		}
		if err := p.control("tcp", netip.AddrPortFrom(ip, 443).String(), nil); !errors.Is(err, ErrURLRefused) {
			t.Errorf("dialled %s: %v", ip, err)
		}
	}
	allowed := func(t *testing.T, ip netip.Addr) {
		t.Helper()
		if err := p.Check(context.Background(), "https://"+netip.AddrPortFrom(ip, 443).String()+"/hook"); err != nil {
			t.Errorf("created with %s: %v", ip, err)
		}
		if err := p.control("tcp", netip.AddrPortFrom(ip, 443).String(), nil); err != nil {
			t.Errorf("dialled %s: %v", ip, err)
		}
	}
	for _, r := range refusedRanges {
		t.Run(r.prefix.String(), func(t *testing.T) {
			first := r.prefix.Masked().Addr()
			refused(t, first)
			refused(t, first.Next())
			refused(t, lastOf(r.prefix))
			if outside := lastOf(r.prefix).Next(); outside.IsValid() && refusal(outside) == "" {
				allowed(t, outside) // the table refuses no more than the range
			}
		})
	}
	for _, c := range []struct{ what, ip string }{
		{"the ranges the issue named", "192.0.2.1"}, {"", "2001:db8::1"}, {"", "192.88.99.1"},
		{"", "198.51.100.7"}, {"", "203.0.113.9"}, {"", "198.19.255.255"}, {"", "255.255.255.255"}, {"", "192.0.0.170"},
		{"IPv4-mapped", "::ffff:127.0.0.1"}, {"", "::ffff:192.0.2.1"}, {"", "::ffff:169.254.169.254"},
		{"NAT64", "64:ff9b::10.0.0.1"}, {"", "64:ff9b::192.0.2.1"}, {"", "64:ff9b::169.254.169.254"},
		{"local-use NAT64 at /96", "64:ff9b:1::a00:1"}, {"local-use NAT64 at /48", "64:ff9b:1:7f00:1::"},
		{"local-use NAT64 at /64", "64:ff9b:1:0:a:0:100::"},
		{"6to4", "2002:7f00:1::1"}, {"", "2002:c000:201::1"}, {"", "2002:a9fe:a9fe::1"},
		{"Teredo server", "2001:0:a00:1::f7f7:f7f7"}, {"Teredo client (inverted)", "2001:0:808:808::80ff:fffe"},
		{"IPv4-compatible", "::127.0.0.1"}, {"", "::8.8.8.8"},
	} {
		t.Run("refused "+c.ip, func(t *testing.T) { refused(t, netip.MustParseAddr(c.ip)) })
	}
	for _, ip := range []string{"8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8",
		"64:ff9b:1:808:8:808:808:808", "2002:808:808::1", "2001:0:808:808::f7f7:f7f7", "192.0.3.1", "198.20.0.1"} {
		t.Run("allowed "+ip, func(t *testing.T) { allowed(t, netip.MustParseAddr(ip)) })
	}
}

func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(a)
	return last
}
