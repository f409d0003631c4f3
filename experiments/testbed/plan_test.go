package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// rttOf is a small RTT space: i to j is 10·(i+j) + 0.5 ms.
func rttOf(n int) *latency.Matrix {
	return latency.NewMatrix("t", n, func(i, j int) float64 {
		if i == j {
			return 0
		}
		return float64(10*(i+j)) + 0.5
	})
}

func plan(t *testing.T, n int, sh Shaper) *Plan {
	t.Helper()
	p, err := NewPlan(Config{N: n, RunID: "0a1f", Octet: 213, RTT: rttOf(n), Shaper: sh})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPlan_Refuses(t *testing.T) {
	ok := Config{N: 4, RunID: "0a1f", Octet: 213, RTT: rttOf(4), Shaper: TUN}
	bad := map[string]func(*Config){
		"no peers":    func(c *Config) { c.N = 0 },
		"too many":    func(c *Config) { c.N = MaxPeers + 1 },
		"short id":    func(c *Config) { c.RunID = "abc" },
		"upper id":    func(c *Config) { c.RunID = "AB12" },
		"octet":       func(c *Config) { c.Octet = 256 },
		"small RTT":   func(c *Config) { c.RTT = rttOf(3) },
		"shaper":      func(c *Config) { c.Shaper = "fq" },
		"loss":        func(c *Config) { c.Loss = 1 },
		"nan loss":    func(c *Config) { c.Loss = -0.1 },
		"jitter":      func(c *Config) { c.Jitter = -time.Millisecond },
		"missing rtt": func(c *Config) { c.RTT = latency.NewMatrix("m", 4, func(i, j int) float64 { return latency.Missing }) },
	}
	for name, f := range bad {
		c := ok
		f(&c)
		if _, err := NewPlan(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := NewPlan(ok); err != nil {
		t.Fatal(err)
	}
}

func TestPlan_AddressesAndNames(t *testing.T) {
	p := plan(t, 600, TUN)
	seen := map[netip.Addr]bool{}
	for i := 0; i < p.N; i++ {
		a := p.Addr(i)
		if seen[a] || !p.Subnet().Contains(a) || a == p.RouterAddr() || a == p.BridgeAddr() {
			t.Fatalf("peer %d: address %s taken or outside %s", i, a, p.Subnet())
		}
		seen[a] = true
		if p.Index(a) != i {
			t.Fatalf("Index(%s) = %d, want %d", a, p.Index(a), i)
		}
	}
	if p.Addr(0).String() != "10.213.0.1" || p.Addr(255).String() != "10.213.1.0" {
		t.Errorf("addresses %s, %s", p.Addr(0), p.Addr(255))
	}
	for _, a := range []string{"10.213.255.253", "10.213.255.254", "10.214.0.1", "10.213.2.89", "192.0.2.1"} {
		if i := p.Index(netip.MustParseAddr(a)); i != -1 {
			t.Errorf("Index(%s) = %d, want -1", a, i)
		}
	}
	// Link names must fit IFNAMSIZ (15 characters) up to MaxPeers.
	big := &Plan{Config: Config{N: MaxPeers, RunID: "ffff"}}
	for _, name := range []string{big.HostVeth(MaxPeers - 1), big.Bridge(), big.RouterVeth()} {
		if len(name) > 15 || !strings.HasPrefix(name, Prefix) || !big.Owns(name) {
			t.Errorf("link name %q: %d characters", name, len(name))
		}
	}
	for _, ns := range []string{p.Namespace(0), p.RouterNamespace()} {
		if !strings.HasPrefix(ns, Prefix+"0a1f") {
			t.Errorf("namespace %q", ns)
		}
	}
}

func TestPlan_OneWayIsHalfTheRTT(t *testing.T) {
	p := plan(t, 5, TUN)
	for i := 0; i < 5; i++ {
		for j := 0; j < 5; j++ {
			want := time.Duration(p.RTT.RTT(i, j) * float64(time.Millisecond) / 2)
			if got := p.OneWay(i, j); got != want {
				t.Errorf("OneWay(%d, %d) = %v, want %v", i, j, got, want)
			}
			if p.OneWay(i, j)+p.OneWay(j, i) != time.Duration(p.RTT.RTT(i, j)*float64(time.Millisecond)) {
				t.Errorf("round trip %d-%d is not the RTT", i, j)
			}
		}
	}
}

func TestPlan_RootBatch(t *testing.T) {
	for _, sh := range []Shaper{TUN, Netem} {
		p := plan(t, 3, sh)
		b := p.RootBatch()
		for i := 0; i < 3; i++ {
			for _, want := range []string{
				"netns add " + p.Namespace(i) + "\n",
				fmt.Sprintf("link add %s type veth peer name eth0 netns %s\n", p.HostVeth(i), p.Namespace(i)),
				fmt.Sprintf("link set %s master %s up\n", p.HostVeth(i), p.Bridge()),
			} {
				if !strings.Contains(b, want) {
					t.Errorf("%s: root batch lacks %q", sh, want)
				}
			}
		}
		if !strings.Contains(b, "addr add 10.213.255.254/16 dev "+p.Bridge()) {
			t.Errorf("%s: bridge address missing", sh)
		}
		if strings.Contains(b, p.RouterNamespace()) != (sh == TUN) {
			t.Errorf("%s: router namespace in the batch: %v", sh, strings.Contains(b, p.RouterNamespace()))
		}
		// Every name made is the run's.
		for _, line := range strings.Split(strings.TrimSpace(b), "\n") {
			f := strings.Fields(line)
			if f[0] == "netns" && !p.Owns(f[2]) || f[0] == "link" && f[1] == "add" && !p.Owns(f[2]) {
				t.Errorf("%s: makes %q, not named for the run", sh, line)
			}
		}
	}
}

func TestPlan_NamespaceAndRouterBatch(t *testing.T) {
	p := plan(t, 3, TUN)
	b := p.NamespaceBatch(2)
	for _, want := range []string{"addr add 10.213.0.3/32 dev eth0", "route add 10.213.255.254/32 dev eth0", "route add 10.213.0.0/16 via 10.213.255.253 dev eth0"} {
		if !strings.Contains(b, want) {
			t.Errorf("tun namespace batch lacks %q:\n%s", want, b)
		}
	}
	r := p.RouterBatch()
	for _, want := range []string{"addr add 10.213.255.253/16 dev eth0", "rule add iif eth0 lookup 100", "route add default dev tun0 table 100"} {
		if !strings.Contains(r, want) {
			t.Errorf("router batch lacks %q:\n%s", want, r)
		}
	}
	n := plan(t, 3, Netem).NamespaceBatch(2)
	if !strings.Contains(n, "addr add 10.213.0.3/16 dev eth0") || strings.Contains(n, "route") {
		t.Errorf("netem namespace batch:\n%s", n)
	}
}

func TestPlan_NetemBatch(t *testing.T) {
	p, err := NewPlan(Config{N: 300, RunID: "0a1f", Octet: 213, RTT: rttOf(300), Shaper: Netem, Loss: 0.01, Jitter: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	i := 7
	b := p.NetemBatch(i)
	count := func(s string) int { return strings.Count(b, s) }
	if c := count("class add dev eth0 parent 1: classid"); c != 2+p.N-1 {
		t.Errorf("%d classes, want %d (default, drop, one per destination)", c, 2+p.N-1)
	}
	if c := count(" netem delay "); c != p.N-1 {
		t.Errorf("%d netem delays, want %d", c, p.N-1)
	}
	if c := count(" flowid 1:"); c != p.N-1 {
		t.Errorf("%d destination filters, want %d", c, p.N-1)
	}
	if !strings.HasPrefix(b, "qdisc add dev eth0 root handle 1: htb default 1\n") {
		t.Errorf("root qdisc: %q", strings.SplitN(b, "\n", 2)[0])
	}
	// Peer 260 (10.213.1.5): class 1:107 (260+3 in hex), its delay, its
	// hash bucket (the last byte, 5).
	j := 260
	d := p.OneWay(i, j).Microseconds()
	for _, want := range []string{
		"class add dev eth0 parent 1: classid 1:107 htb rate 10gbit quantum 60000\n",
		fmt.Sprintf("qdisc add dev eth0 parent 1:107 handle 107: netem delay %dus 2000us loss 1.0000%% limit 10000\n", d),
		"filter add dev eth0 parent 1: prio 2 protocol ip u32 ht 100:5: match ip dst 10.213.1.5/32 flowid 1:107\n",
		"match ip dst 10.213.0.0/16 hashkey mask 0x000000ff at 16 link 100:\n",
		"qdisc add dev eth0 parent 1:2 handle 2: netem loss 100%\n",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("netem batch lacks %q", want)
		}
	}
	if strings.Contains(b, fmt.Sprintf("dst %s/32", p.Addr(i))) {
		t.Error("a filter to the namespace's own address")
	}
}

func TestPlan_NetemPartition(t *testing.T) {
	p := plan(t, 6, Netem)
	side := []int{1, 2, 1, 2, 0, 1}
	b := p.NetemPartitionBatch(0, side)
	for j, s := range side {
		has := strings.Contains(b, fmt.Sprintf("dst %s/32 flowid 1:2\n", p.Addr(j)))
		if want := s == 2; has != want {
			t.Errorf("peer 0 → %d (side %d): dropped %v, want %v", j, s, has, want)
		}
	}
	if p.NetemPartitionBatch(4, side) != "" {
		t.Error("a peer on no side is cut off")
	}
	if !strings.Contains(p.NetemHealBatch(), "prio 1") {
		t.Error("heal does not remove the prio-1 filters")
	}
}

func TestHalf(t *testing.T) {
	side := Half([]int{4, 0, 2, 3, 1}, 6)
	want := []int{1, 2, 2, 2, 1, 0}
	for i := range want {
		if side[i] != want[i] {
			t.Fatalf("Half = %v, want %v", side, want)
		}
	}
}

func TestPickOctet(t *testing.T) {
	used := UsedPrefixes(`2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0
3: br0    inet 10.220.255.254/16 scope global br0
default via 192.0.2.1 dev eth0
10.221.0.0/16 dev br1 proto kernel scope link src 10.221.255.254
10.0.0.0/8 via 192.0.2.9 dev eth0`)
	if len(used) != 4 {
		t.Fatalf("UsedPrefixes: %v", used)
	}
	// 10.0.0.0/8 overlaps every candidate.
	if _, err := PickOctet(used, 20); err == nil {
		t.Error("picked a subnet inside a used 10/8")
	}
	used = used[:3]
	o, err := PickOctet(used, 20) // start at 220: taken, and 221
	if err != nil || o != 222 {
		t.Errorf("PickOctet = %d, %v; want 222", o, err)
	}
	if o, _ := PickOctet(nil, 0); o != 200 {
		t.Errorf("PickOctet(nil, 0) = %d", o)
	}
	// A default route says nothing of the addresses in use.
	if o, err := PickOctet([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, 1); err != nil || o != 201 {
		t.Errorf("PickOctet past a default route = %d, %v", o, err)
	}
}

func TestParseIPOutput(t *testing.T) {
	ns := ParseNetnsList("sptb-0a1f-1 (id: 3)\nsptb-0a1f-0\n\nother\n")
	if strings.Join(ns, ",") != "sptb-0a1f-1,sptb-0a1f-0,other" {
		t.Errorf("ParseNetnsList = %v", ns)
	}
	links := ParseLinkNames(`1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
7: sptb-0a1fv0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master sptb-0a1fbr state UP
8: sptb-0a1fbr: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500`)
	if strings.Join(links, ",") != "lo,sptb-0a1fv0,sptb-0a1fbr" {
		t.Errorf("ParseLinkNames = %v", links)
	}
	b := TeardownBatch([]string{"sptb-0a1fv0", "sptb-0a1fbr"}, []string{"sptb-0a1f-0"})
	if b != "link del sptb-0a1fv0\nlink del sptb-0a1fbr\nnetns del sptb-0a1f-0\n" {
		t.Errorf("TeardownBatch = %q", b)
	}
}
