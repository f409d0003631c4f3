package testbed

import (
	"fmt"
	"net/netip"
	"strings"
)

// UsedPrefixes reads the IPv4 prefixes of `ip -4 -o addr` and `ip -4 route`
// output (any mix of the two): every a.b.c.d/len it finds.
func UsedPrefixes(out string) []netip.Prefix {
	var used []netip.Prefix
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			used = append(used, p.Masked())
		}
	}
	return used
}

// PickOctet chooses the second octet of a 10.x.0.0/16 that overlaps none of
// used, starting from a preferred one (a run's hash) and wrapping round
// 200 … 254, so that two beds at once take different subnets.
func PickOctet(used []netip.Prefix, prefer int) (int, error) {
	const lo, hi = 200, 254
	span := hi - lo + 1
	start := ((prefer%span)+span)%span + lo
	for k := 0; k < span; k++ {
		o := lo + (start-lo+k)%span
		sub := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(o), 0, 0}), 16)
		free := true
		for _, u := range used {
			// A default route (0.0.0.0/0) overlaps everything and says
			// nothing of the addresses in use.
			if u.Bits() >= 8 && u.Overlaps(sub) {
				free = false
				break
			}
		}
		if free {
			return o, nil
		}
	}
	return 0, fmt.Errorf("testbed: every 10.%d-%d.0.0/16 is in use on this machine", lo, hi)
}

// ParseNetnsList reads `ip netns list`: a name a line, maybe followed by
// "(id: N)".
func ParseNetnsList(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// ParseLinkNames reads `ip -o link show`: "N: NAME[@PEER]: <FLAGS> ..." a
// line.
func ParseLinkNames(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		name, _, _ = strings.Cut(name, "@")
		names = append(names, name)
	}
	return names
}
