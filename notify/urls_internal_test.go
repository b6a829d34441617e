package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
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

// The attacks of a security review, as they were typed: an address with a
// zone is refused whatever it is (netip.Prefix.Contains never matches
// one), and every IPv6 form that embeds an IPv4 address is judged by it,
// at creation (Check) and on every connection (control).
func TestURLPolicyRefusesZonesAndEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	p := URLPolicy{}
	for _, c := range []struct {
		url, dialled string
		refused      bool
	}{
		{"https://[::1%25lo]:8443/hook", "[::1%lo]:8443", true},
		{"https://[fe80::1%25eth0]/hook", "[fe80::1%eth0]:443", true},
		{"https://[fe80::fc:ff:fe00:1%252]/hook", "[fe80::fc:ff:fe00:1%2]:443", true},
		{"https://[2606:4700:4700::1111%25eth0]/hook", "[2606:4700:4700::1111%eth0]:443", true}, // a zone on a public address picks our interface too
		{"https://[::ffff:0:7f00:1]/hook", "[::ffff:0:7f00:1]:443", true},                       // IPv4-translated 127.0.0.1
		{"https://[::ffff:0:a9fe:a9fe]/hook", "[::ffff:0:a9fe:a9fe]:443", true},                 // IPv4-translated metadata
		{"https://[::ffff:0:10.1.2.3]/hook", "[::ffff:0:a01:203]:443", true},
		{"https://[::ffff:0:808:808]/hook", "[::ffff:0:808:808]:443", false}, // IPv4-translated 8.8.8.8
		{"https://[::ffff:7f00:1]/hook", "[::ffff:7f00:1]:443", true},        // IPv4-mapped 127.0.0.1
		{"https://[::ffff:a9fe:a9fe%25lo]/hook", "[::ffff:a9fe:a9fe%lo]:443", true},
		{"https://[64:ff9b::7f00:1]/hook", "[64:ff9b::7f00:1]:443", true},
		{"https://[64:ff9b::7f00:1%25lo]/hook", "[64:ff9b::7f00:1%lo]:443", true},
		{"https://[64:ff9b:1:a9fe:a9:fe00::]/hook", "[64:ff9b:1:a9fe:a9:fe00::]:443", true},    // local-use NAT64 /48 of 169.254.169.254
		{"https://[2002:a00:1::1]/hook", "[2002:a00:1::1]:443", true},                          // 6to4 of 10.0.0.1
		{"https://[2001:0:808:808::80ff:fffe]/hook", "[2001:0:808:808::80ff:fffe]:443", true},  // Teredo client 127.0.0.1
		{"https://[2001:0:808:808::f7f7:f7f7]/hook", "[2001:0:808:808::f7f7:f7f7]:443", false}, // Teredo client 8.8.8.8
		{"https://[::7f00:1]/hook", "[::7f00:1]:443", true},                                    // IPv4-compatible
		{"https://[::808:808]/hook", "[::808:808]:443", true},                                  // deprecated whatever it embeds
	} {
		t.Run(c.url, func(t *testing.T) {
			created := p.Check(context.Background(), c.url)
			dialled := p.control("tcp6", c.dialled, nil)
			if c.refused {
				if !errors.Is(created, ErrURLRefused) {
					t.Errorf("created: %v", created)
				}
				if !errors.Is(dialled, ErrURLRefused) {
					t.Errorf("dialled: %v", dialled)
				}
				return
			}
			if created != nil || dialled != nil {
				t.Errorf("created: %v, dialled: %v", created, dialled)
			}
		})
	}
}

// The policy's dialer, the one every delivery connects through, does not
// reach a listener on ::1 when the address carries a zone.
func TestURLPolicyDialerRefusesZone(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The unguarded dial reaches it: the zone is no obstacle to the kernel.
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("[::1%%lo]:%d", port))
	if err != nil {
		t.Fatalf("plain dial: %v", err)
	}
	c.Close()
	<-accepted
	_, err = URLPolicy{}.Dialer().DialContext(ctx, "tcp", fmt.Sprintf("[::1%%lo]:%d", port))
	if !errors.Is(err, ErrURLRefused) {
		t.Fatalf("policy dial: %v", err) // Control runs before connect(2): refused means never connected
	}
}
