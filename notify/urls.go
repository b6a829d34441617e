package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// URLPolicy decides where deliveries may go. Outside dev mode only https
// to public addresses: none of refusedRanges (loopback, private,
// link-local with cloud metadata at 169.254.169.254, CGNAT, multicast,
// documentation, benchmarking, relay...), nor an IPv6 form that embeds
// such an IPv4 address, nor any address with a zone (a zone names one of
// our own interfaces, which only a local address needs).
// It is checked when an endpoint is created and again on every connection
// a delivery makes, on the address DNS resolved to (Dialer's Control), so
// that a name that resolves elsewhere later (DNS rebinding) is refused.
type URLPolicy struct {
	// AllowPrivate (dev mode, REBILL_WEBHOOK_ALLOW_PRIVATE=1) allows any
	// address and http.
	AllowPrivate bool
	// Resolver looks names up at creation; nil: net.DefaultResolver.
	Resolver *net.Resolver
}

// ErrURLRefused: a webhook URL the policy does not allow.
var ErrURLRefused = errors.New("webhook URL refused")

// refusedRanges is the one table of addresses a delivery may not reach:
// the IANA IPv4 and IPv6 Special-Purpose Address Registries' blocks that
// are not globally reachable, plus multicast and the documentation,
// benchmarking and relay ranges, which no receiver of ours can be at
// (https://www.iana.org/assignments/iana-ipv4-special-registry,
// https://www.iana.org/assignments/iana-ipv6-special-registry).
var refusedRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network (RFC 791)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (RFC 6890)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast (RFC 7526)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (RFC 5737)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved and broadcast (RFC 1112)"},
	{netip.MustParsePrefix("::/96"), "unspecified, loopback or IPv4-compatible (RFC 4291)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (RFC 6666)"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking (RFC 5180)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation (RFC 3849)"},
	{netip.MustParsePrefix("3fff::/20"), "documentation (RFC 9637)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (RFC 4193)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (RFC 3879)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// embedded are the IPv6 forms that carry an IPv4 address: each is judged
// by the IPv4 addresses it embeds, never allowed because a registry calls
// its prefix global (64:ff9b::/96 is, and reaches any IPv4 through the
// operator's NAT64). A local-use NAT64 prefix may be any RFC 6052 length
// from /48 to /96, so the address is read at each, and all must pass.
// IPv4-compatible addresses (::/96) embed one too, but refusedRanges
// refuses the whole block whatever it embeds: RFC 4291 section 2.5.5.1
// deprecates the form and no receiver of ours is at one.
var embedded = []struct {
	prefix netip.Prefix
	what   string
	ipv4   func(a [16]byte) []netip.Addr
}{
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped (RFC 4291)", func(a [16]byte) []netip.Addr { return []netip.Addr{v4(a[12:16])} }},
	// ::ffff:0:a.b.c.d, the "IPv4-translated" form of SIIT (RFC 2765
	// section 2.1). RFC 6145 and then RFC 7915 replaced it by RFC 6052
	// addresses, but a translator or stack that still honours it reaches
	// the IPv4 address, and no registry lists the block as special.
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated (RFC 2765, RFC 6145, RFC 7915)", func(a [16]byte) []netip.Addr { return []netip.Addr{v4(a[12:16])} }},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (RFC 6052)", func(a [16]byte) []netip.Addr { return []netip.Addr{v4(a[12:16])} }},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215)", func(a [16]byte) []netip.Addr {
		// RFC 6052 section 2.2: bits 64-71 are skipped.
		return []netip.Addr{
			v4([]byte{a[6], a[7], a[9], a[10]}),  // /48
			v4([]byte{a[7], a[9], a[10], a[11]}), // /56
			v4(a[9:13]),                          // /64
			v4(a[12:16]),                         // /96
		}
	}},
	// RFC 3056 section 2: 2002:V4ADDR::/48, the IPv4 address in bits 16-47.
	{netip.MustParsePrefix("2002::/16"), "6to4 (RFC 3056)", func(a [16]byte) []netip.Addr { return []netip.Addr{v4(a[2:6])} }},
	// RFC 4380 section 4: the Teredo server's IPv4 in bits 32-63, the
	// client's (mapped) IPv4 in the last 32 bits, every bit inverted.
	{netip.MustParsePrefix("2001::/32"), "Teredo (RFC 4380)", func(a [16]byte) []netip.Addr {
		client := [4]byte{^a[12], ^a[13], ^a[14], ^a[15]}
		return []netip.Addr{v4(a[4:8]), v4(client[:])} // the server's, the client's
	}},
}

func v4(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b)) }

// refusal says why a delivery may not connect to ip; "" when it may.
func refusal(ip netip.Addr) string {
	if !ip.IsValid() {
		return "not an address"
	}
	if ip.Zone() != "" {
		// A zone picks one of our interfaces, so the address is local
		// (link-local, loopback); netip.Prefix.Contains is false for
		// any address with a zone, so no table below would see it.
		return "an address with a zone"
	}
	if ip.Is6() {
		for _, e := range embedded {
			if !e.prefix.Contains(ip) {
				continue
			}
			for _, inner := range e.ipv4(ip.As16()) {
				if why := refusal(inner); why != "" {
					return e.what + " of " + inner.String() + ", " + why
				}
			}
			return ""
		}
	}
	ip = ip.Unmap()
	for _, r := range refusedRanges {
		if r.prefix.Contains(ip) {
			return r.what
		}
	}
	return ""
}

// PublicAddr reports whether a delivery may connect to ip.
func PublicAddr(ip netip.Addr) bool { return refusal(ip) == "" }

// Check validates a URL at creation: scheme, host, and every address the
// host resolves to now. The error wraps ErrURLRefused and says why.
func (p URLPolicy) Check(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%w: not an absolute URL", ErrURLRefused)
	}
	if u.User != nil {
		return fmt.Errorf("%w: credentials in the URL are not allowed", ErrURLRefused)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowPrivate:
	default:
		return fmt.Errorf("%w: must be https", ErrURLRefused)
	}
	if p.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if why := refusal(ip); why != "" {
			return fmt.Errorf("%w: the address is not a public one (%s)", ErrURLRefused, why)
		}
		return nil
	}
	resolver := p.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("%w: the host does not resolve", ErrURLRefused)
	}
	for _, ip := range addrs {
		if why := refusal(ip); why != "" {
			return fmt.Errorf("%w: the host resolves to an address that is not a public one (%s)", ErrURLRefused, why)
		}
	}
	return nil
}

// control refuses a connection to a non-public address: it runs after DNS
// resolution, on the very address dialled.
func (p URLPolicy) control(_, address string, _ syscall.RawConn) error {
	if p.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %s", ErrURLRefused, address)
	}
	if why := refusal(ap.Addr()); why != "" {
		return fmt.Errorf("%w: %s is not a public address (%s)", ErrURLRefused, ap.Addr().Unmap(), why)
	}
	return nil
}

// Dialer is a dialer that enforces the policy on every connection.
func (p URLPolicy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
}
