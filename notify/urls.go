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
// to public addresses: no loopback, private, link-local (cloud metadata
// at 169.254.169.254 included), CGNAT, multicast or unspecified address.
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

var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 of any IPv4, private ones included
	netip.MustParsePrefix("2002::/16"),    // 6to4
}

// PublicAddr reports whether a delivery may connect to ip.
func PublicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

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
		if !PublicAddr(ip) {
			return fmt.Errorf("%w: the address is not a public one (loopback, private, link-local...)", ErrURLRefused)
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
		if !PublicAddr(ip) {
			return fmt.Errorf("%w: the host resolves to an address that is not a public one (loopback, private, link-local...)", ErrURLRefused)
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
	if !PublicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s is not a public address", ErrURLRefused, ap.Addr().Unmap())
	}
	return nil
}

// Dialer is a dialer that enforces the policy on every connection.
func (p URLPolicy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
}
