package testbed

import (
	"fmt"
	"strings"
	"time"
)

// The batches below are the bed's `ip -batch` and `tc -batch` input, one
// command a line; Bed.Up feeds them to ip and tc. They are pure so that
// what a bed does to the machine can be read and tested without root.

// RootBatch makes, in the root namespace, every namespace, the bridge with
// its address, and every veth with its root end a bridge port and the
// other end (InnerDev) in its namespace; for a NAT'd peer, also its inner
// namespace and the veth between that and Namespace(i), made in place.
func (p *Plan) RootBatch() string {
	var b strings.Builder
	for i := 0; i < p.N; i++ {
		fmt.Fprintf(&b, "netns add %s\n", p.Namespace(i))
	}
	if p.Shaper == TUN {
		fmt.Fprintf(&b, "netns add %s\n", p.RouterNamespace())
	}
	p.natRootLines(&b)
	fmt.Fprintf(&b, "link add %s type bridge\n", p.Bridge())
	fmt.Fprintf(&b, "addr add %s/16 dev %s\n", p.BridgeAddr(), p.Bridge())
	fmt.Fprintf(&b, "link set %s up\n", p.Bridge())
	veth := func(host, ns string) {
		fmt.Fprintf(&b, "link add %s type veth peer name %s netns %s\n", host, InnerDev, ns)
		fmt.Fprintf(&b, "link set %s master %s up\n", host, p.Bridge())
	}
	for i := 0; i < p.N; i++ {
		veth(p.HostVeth(i), p.Namespace(i))
	}
	if p.Shaper == TUN {
		veth(p.RouterVeth(), p.RouterNamespace())
	}
	return b.String()
}

// NamespaceBatch configures peer i's namespace (run with `ip -n NS`): its
// address and, with the tun shaper, routes that send the subnet through
// the router while the bridge's address (the status reader) is reached
// directly; for a NAT'd peer, also the gateway address on the veth to its
// inner namespace (the rest of the router: NATSysctls, NATRuleset).
func (p *Plan) NamespaceBatch(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "link set lo up\n")
	if p.Shaper == TUN {
		fmt.Fprintf(&b, "addr add %s/32 dev %s\n", p.Addr(i), InnerDev)
	} else {
		fmt.Fprintf(&b, "addr add %s/16 dev %s\n", p.Addr(i), InnerDev)
	}
	fmt.Fprintf(&b, "link set %s up\n", InnerDev)
	if p.Shaper == TUN {
		fmt.Fprintf(&b, "route add %s/32 dev %s\n", p.BridgeAddr(), InnerDev)
		fmt.Fprintf(&b, "route add %s/32 dev %s\n", p.RouterAddr(), InnerDev)
		fmt.Fprintf(&b, "route add %s via %s dev %s\n", p.Subnet(), p.RouterAddr(), InnerDev)
	}
	if p.NATed(i) {
		p.natRouterLines(&b, i)
	}
	return b.String()
}

// routerTable is the router's routing table for packets from the bridge:
// everything into the TUN device.
const routerTable = 100

// RouterBatch configures the router namespace once the TUN device exists
// in it (tun shaper): a packet from the bridge goes into the TUN device;
// one the delay line writes back is routed by the main table to its
// destination on the bridge.
func (p *Plan) RouterBatch() string {
	var b strings.Builder
	fmt.Fprintf(&b, "link set lo up\n")
	fmt.Fprintf(&b, "addr add %s/16 dev %s\n", p.RouterAddr(), InnerDev)
	fmt.Fprintf(&b, "link set %s up\n", InnerDev)
	// The TUN device queues up to txqueuelen packets for the delay line to
	// read; a burst past that is dropped, as SYNs that take a second each
	// to retransmit.
	fmt.Fprintf(&b, "link set %s txqueuelen 20000 up\n", TunDev)
	fmt.Fprintf(&b, "rule add iif %s lookup %d pref 100\n", InnerDev, routerTable)
	fmt.Fprintf(&b, "route add default dev %s table %d\n", TunDev, routerTable)
	return b.String()
}

// Classes of the netem shaper's HTB root: 1:1 undelayed (the default:
// ARP, and the status reader), 1:2 the partition's black hole, 1:(j+3)
// the way to peer j. Minor numbers are hex and at most ffff.
const (
	classDefault = 1
	classDrop    = 2
	classFirst   = 3
)

func classOf(j int) int { return classFirst + j }

// netemRate is every HTB class's rate: far above what the peers send, so
// that only netem delays them.
const netemRate = "10gbit"

// NetemBatch shapes peer i's egress (run with `tc -n NS`): an HTB root, a
// class with a netem qdisc per destination holding it OneWay(i, j) (with
// jitter and loss), and u32 filters on the destination address, hashed on
// its last byte so that a packet meets a handful of filters, not N.
func (p *Plan) NetemBatch(i int) string {
	var b strings.Builder
	dev := InnerDev
	fmt.Fprintf(&b, "qdisc add dev %s root handle 1: htb default %x\n", dev, classDefault)
	class := func(c int) {
		fmt.Fprintf(&b, "class add dev %s parent 1: classid 1:%x htb rate %s quantum 60000\n", dev, c, netemRate)
	}
	class(classDefault)
	class(classDrop)
	fmt.Fprintf(&b, "qdisc add dev %s parent 1:%x handle %x: netem loss 100%%\n", dev, classDrop, classDrop)
	for j := 0; j < p.N; j++ {
		if j == i {
			continue
		}
		c := classOf(j)
		class(c)
		fmt.Fprintf(&b, "qdisc add dev %s parent 1:%x handle %x: netem %s limit 10000\n", dev, c, c, p.netemArgs(i, j))
	}
	// A 256-bucket hash table on the destination's last byte, linked from
	// the root table for the bed's subnet.
	fmt.Fprintf(&b, "filter add dev %s parent 1: prio 2 handle 100: protocol ip u32 divisor 256\n", dev)
	fmt.Fprintf(&b, "filter add dev %s parent 1: prio 2 protocol ip u32 ht 800:: match ip dst %s hashkey mask 0x000000ff at 16 link 100:\n", dev, p.Subnet())
	for j := 0; j < p.N; j++ {
		if j == i {
			continue
		}
		a := p.Addr(j).As4()
		fmt.Fprintf(&b, "filter add dev %s parent 1: prio 2 protocol ip u32 ht 100:%x: match ip dst %s/32 flowid 1:%x\n", dev, a[3], p.Addr(j), classOf(j))
	}
	return b.String()
}

// netemArgs is netem's delay (and jitter, and loss) from i to j.
func (p *Plan) netemArgs(i, j int) string {
	s := "delay " + usec(p.OneWay(i, j))
	if p.Jitter > 0 {
		s += " " + usec(p.Jitter)
	}
	if p.Loss > 0 {
		s += fmt.Sprintf(" loss %.4f%%", 100*p.Loss)
	}
	return s
}

func usec(d time.Duration) string { return fmt.Sprintf("%dus", d.Microseconds()) }

// NetemPartitionBatch cuts peer i off from every peer on another side
// (side[j] != side[i], both non-zero): prio-1 filters, met before the
// delays, send their addresses to the black hole.
func (p *Plan) NetemPartitionBatch(i int, side []int) string {
	var b strings.Builder
	for j := 0; j < p.N; j++ {
		if j == i || side[i] == 0 || side[j] == 0 || side[j] == side[i] {
			continue
		}
		fmt.Fprintf(&b, "filter add dev %s parent 1: prio 1 protocol ip u32 match ip dst %s/32 flowid 1:%x\n", InnerDev, p.Addr(j), classDrop)
	}
	return b.String()
}

// NetemHealBatch removes the partition's filters of a namespace.
func (p *Plan) NetemHealBatch() string {
	return fmt.Sprintf("filter del dev %s parent 1: protocol ip prio 1\n", InnerDev)
}

// TeardownBatch removes every link of the run (root ends of the veths,
// which takes their other ends, and the bridge) and every namespace (`ip
// -force -batch`: a name already gone is not an error worth stopping for).
func TeardownBatch(links, namespaces []string) string {
	var b strings.Builder
	for _, l := range links {
		fmt.Fprintf(&b, "link del %s\n", l)
	}
	for _, ns := range namespaces {
		fmt.Fprintf(&b, "netns del %s\n", ns)
	}
	return b.String()
}
