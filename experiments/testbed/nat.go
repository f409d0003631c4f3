package testbed

import (
	"fmt"
	"net/netip"
	"strings"
)

// A NAT'd peer (Config.NAT[i]) sits behind a home router that masquerades
// it: Namespace(i) keeps its bridge veth, its address Addr(i) and its
// shaping (with the tun shaper, its routes through the router namespace)
// and becomes the router; the peer runs in InnerNamespace(i), on a veth to
// it, at NATInnerAddr. Every NAT has the same private /24 behind it, as
// home routers do.
//
// The router masquerades what the peer sends out of its bridge side, so
// the other peers (and the delay line, which delays it as peer i's) see it
// come from Addr(i); forwards the status port (TCP StatusPort at Addr(i))
// to the peer, so that the bed reads every peer's /status the same way;
// and drops whatever else arrives unasked on its bridge side, as a real
// home router does: no reset, no ICMP, so that a dial to a NAT'd peer's
// address times out, and a hole punch's early packet does no harm.
var (
	// NATLAN is the private network behind every NAT.
	NATLAN = netip.MustParsePrefix("192.168.0.0/24")
	// NATGateway is the home router's address on NATLAN: the peer's
	// default route.
	NATGateway = netip.MustParseAddr("192.168.0.1")
	// NATInnerAddr is a NAT'd peer's own address, the one it listens on.
	NATInnerAddr = netip.MustParseAddr("192.168.0.2")
)

// NATTable is the nftables table of a home router's rules.
const NATTable = "sptb_nat"

// NATed is whether peer i is behind a NAT.
func (p *Plan) NATed(i int) bool { return p.NAT != nil && p.NAT[i] }

// NATCount is how many peers are behind a NAT.
func (p *Plan) NATCount() int {
	n := 0
	for _, nat := range p.NAT {
		if nat {
			n++
		}
	}
	return n
}

// InnerNamespace is the namespace a NAT'd peer runs in, behind
// Namespace(i), its home router.
func (p *Plan) InnerNamespace(i int) string { return p.Namespace(i) + "-n" }

// PeerNamespace is where peer i's process runs: InnerNamespace(i) if it is
// NAT'd, else Namespace(i).
func (p *Plan) PeerNamespace(i int) string {
	if p.NATed(i) {
		return p.InnerNamespace(i)
	}
	return p.Namespace(i)
}

// PeerAddr is the address peer i's process has and listens on:
// NATInnerAddr if it is NAT'd, else Addr(i). The others reach it (if at
// all) at Addr(i).
func (p *Plan) PeerAddr(i int) netip.Addr {
	if p.NATed(i) {
		return NATInnerAddr
	}
	return p.Addr(i)
}

// NATVeth is the home router's end of a NAT'd peer's veth, in Namespace(i)
// (the peer's end is InnerDev in InnerNamespace(i)). Both ends are made in
// their namespaces, never in the root one; the name is the run's all the
// same, and at most 15 characters for i below 100 000.
func (p *Plan) NATVeth(i int) string { return fmt.Sprintf("%sn%d", p.runPrefix(), i) }

// natRootLines are RootBatch's lines for NAT'd peers: the inner namespaces,
// and the veths between them and their routers, made in place.
func (p *Plan) natRootLines(b *strings.Builder) {
	for i := 0; i < p.N; i++ {
		if p.NATed(i) {
			fmt.Fprintf(b, "netns add %s\n", p.InnerNamespace(i))
		}
	}
	for i := 0; i < p.N; i++ {
		if p.NATed(i) {
			fmt.Fprintf(b, "link add %s netns %s type veth peer name %s netns %s\n", p.NATVeth(i), p.Namespace(i), InnerDev, p.InnerNamespace(i))
		}
	}
}

// natRouterLines are NamespaceBatch's lines for a NAT'd peer's router: the
// gateway address on its end of the veth.
func (p *Plan) natRouterLines(b *strings.Builder, i int) {
	fmt.Fprintf(b, "addr add %s/%d dev %s\n", NATGateway, NATLAN.Bits(), p.NATVeth(i))
	fmt.Fprintf(b, "link set %s up\n", p.NATVeth(i))
}

// InnerBatch configures a NAT'd peer's namespace (run with `ip -n
// InnerNamespace(i)`): loopback, NATInnerAddr on its end of the veth, and
// the default route through the home router.
func (p *Plan) InnerBatch(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "link set lo up\n")
	fmt.Fprintf(&b, "addr add %s/%d dev %s\n", NATInnerAddr, NATLAN.Bits(), InnerDev)
	fmt.Fprintf(&b, "link set %s up\n", InnerDev)
	fmt.Fprintf(&b, "route add default via %s dev %s\n", NATGateway, InnerDev)
	return b.String()
}

// NATSysctls make a NAT'd peer's namespace a router.
var NATSysctls = [][2]string{
	{"net/ipv4/ip_forward", "1"},
}

// NATRuleset is the nftables ruleset of a NAT'd peer's home router (`nft
// -f -` in Namespace(i)), its bridge side InnerDev: masquerade what the
// LAN sends out of it; forward TCP StatusPort at Addr(i) to the peer; let
// in from it only the replies of connections made from inside and the
// forwarded port, dropping the rest silently (for the router itself too:
// no reset, no port unreachable).
func (p *Plan) NATRuleset(i int) string {
	var b strings.Builder
	wan, lan := InnerDev, p.NATVeth(i)
	fmt.Fprintf(&b, "table ip %s {\n", NATTable)
	fmt.Fprintf(&b, "\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %q ip daddr %s tcp dport %d dnat to %s:%d\n", wan, p.Addr(i), StatusPort, NATInnerAddr, StatusPort)
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\toifname %q ip saddr %s masquerade\n", wan, NATLAN)
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %q oifname %q ct state established,related accept\n", wan, lan)
	fmt.Fprintf(&b, "\t\tiifname %q oifname %q ct status dnat accept\n", wan, lan)
	fmt.Fprintf(&b, "\t\tiifname %q drop\n", wan)
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %q ct state established,related accept\n", wan)
	fmt.Fprintf(&b, "\t\tiifname %q drop\n", wan)
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// HostName is peer i's DNS name in the bed, under .example (RFC 2606):
// a name go-libp2p counts as public, where it counts the bed's 10.x
// addresses as private. AutoRelay makes a NAT'd peer's /p2p-circuit
// addresses only from its relays' public addresses, so a public peer
// advertises /dns4/HostName(i) (`peer run --advertise`) beside its address,
// and every namespace resolves it (Hosts).
func (p *Plan) HostName(i int) string { return fmt.Sprintf("p%d.%s%s.example", i, Prefix, p.RunID) }

// Hosts is the /etc/hosts of every peer's namespace in a bed with NAT'd
// peers: localhost and every public peer's HostName at its address.
func (p *Plan) Hosts() string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	for i := 0; i < p.N; i++ {
		if !p.NATed(i) {
			fmt.Fprintf(&b, "%s\t%s\n", p.Addr(i), p.HostName(i))
		}
	}
	return b.String()
}
