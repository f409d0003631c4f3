package testbed

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

func natPlan(t *testing.T, sh Shaper) *Plan {
	t.Helper()
	p, err := NewPlan(Config{N: 4, RunID: "0a1f", Octet: 213, RTT: rttOf(4), Shaper: sh, NAT: []bool{false, true, false, true}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewPlan_NAT(t *testing.T) {
	c := Config{N: 4, RunID: "0a1f", Octet: 213, RTT: rttOf(4), Shaper: TUN}
	for _, nat := range [][]bool{{}, {true}, {true, false, true, false, true}} {
		c.NAT = nat
		if _, err := NewPlan(c); !errors.Is(err, ErrConfig) {
			t.Errorf("NAT %v for 4 peers: %v, want ErrConfig", nat, err)
		}
	}
	nat := []bool{true, false, false, false}
	c.NAT = nat
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	nat[1] = true // the plan keeps its own
	if !p.NATed(0) || p.NATed(1) || p.NATCount() != 1 {
		t.Errorf("NATed(0), NATed(1), NATCount = %v, %v, %d", p.NATed(0), p.NATed(1), p.NATCount())
	}
	if q := plan(t, 4, TUN); q.NATed(0) || q.NATCount() != 0 {
		t.Error("a plan without NAT has a NAT'd peer")
	}
}

func TestPlan_NATNamesAndAddresses(t *testing.T) {
	p := natPlan(t, TUN)
	for i := 0; i < p.N; i++ {
		ns, a := p.Namespace(i), p.Addr(i)
		if p.NATed(i) {
			ns, a = ns+"-n", NATInnerAddr
		}
		if p.PeerNamespace(i) != ns || p.PeerAddr(i) != a {
			t.Errorf("peer %d: PeerNamespace %s, PeerAddr %s; want %s, %s", i, p.PeerNamespace(i), p.PeerAddr(i), ns, a)
		}
		if !p.Owns(p.InnerNamespace(i)) || !p.Owns(p.NATVeth(i)) {
			t.Errorf("peer %d: %s, %s not the run's", i, p.InnerNamespace(i), p.NATVeth(i))
		}
	}
	if p.InnerNamespace(3) != "sptb-0a1f-3-n" || p.NATVeth(3) != "sptb-0a1fn3" {
		t.Errorf("names %s, %s", p.InnerNamespace(3), p.NATVeth(3))
	}
	if NATInnerAddr.String() != "192.168.0.2" || NATGateway.String() != "192.168.0.1" || !NATLAN.Contains(NATInnerAddr) || !NATLAN.Contains(NATGateway) {
		t.Errorf("NAT LAN %s: gateway %s, peer %s", NATLAN, NATGateway, NATInnerAddr)
	}
	if p.Subnet().Overlaps(NATLAN) {
		t.Errorf("the bed's %s overlaps the NAT LAN %s", p.Subnet(), NATLAN)
	}
	if p.Index(NATInnerAddr) != -1 {
		t.Error("the private address is a peer's")
	}
	big := &Plan{Config: Config{N: MaxPeers, RunID: "ffff"}}
	if name := big.NATVeth(MaxPeers - 1); len(name) > 15 {
		t.Errorf("NAT veth name %q: %d characters", name, len(name))
	}
}

func TestPlan_NATBatches(t *testing.T) {
	for _, sh := range []Shaper{TUN, Netem} {
		p := natPlan(t, sh)
		root := p.RootBatch()
		for i := 0; i < p.N; i++ {
			lines := []string{
				"netns add " + p.InnerNamespace(i) + "\n",
				fmt.Sprintf("link add %s netns %s type veth peer name eth0 netns %s\n", p.NATVeth(i), p.Namespace(i), p.InnerNamespace(i)),
			}
			for _, l := range lines {
				if strings.Contains(root, l) != p.NATed(i) {
					t.Errorf("%s: root batch has %q: %v (peer %d NAT'd: %v)", sh, l, !p.NATed(i), i, p.NATed(i))
				}
			}
			gw := fmt.Sprintf("addr add 192.168.0.1/24 dev %s\n", p.NATVeth(i))
			if strings.Contains(p.NamespaceBatch(i), gw) != p.NATed(i) {
				t.Errorf("%s: peer %d's namespace batch:\n%s", sh, i, p.NamespaceBatch(i))
			}
		}
		// The inner namespaces and veths come after the namespaces they go in.
		if strings.Index(root, "link add "+p.NATVeth(1)) < strings.Index(root, "netns add "+p.InnerNamespace(3)) ||
			strings.Index(root, "netns add "+p.InnerNamespace(1)) < strings.Index(root, "netns add "+p.Namespace(3)+"\n") {
			t.Errorf("%s: root batch out of order:\n%s", sh, root)
		}
		// A NAT'd peer's router keeps its bridge side as any peer's.
		q := plan(t, 4, sh)
		if nb, qb := p.NamespaceBatch(1), q.NamespaceBatch(1); !strings.HasPrefix(nb, qb) {
			t.Errorf("%s: the router's batch does not start with the peer's:\n%s\nvs\n%s", sh, nb, qb)
		}
		if p.NetemBatch(1) != q.NetemBatch(1) {
			t.Errorf("%s: the router's netem batch differs", sh)
		}
	}
	p := natPlan(t, TUN)
	in := p.InnerBatch(1)
	for _, want := range []string{"link set lo up\n", "addr add 192.168.0.2/24 dev eth0\n", "link set eth0 up\n", "route add default via 192.168.0.1 dev eth0\n"} {
		if !strings.Contains(in, want) {
			t.Errorf("inner batch lacks %q:\n%s", want, in)
		}
	}
}

func TestPlan_NATRuleset(t *testing.T) {
	p := natPlan(t, TUN)
	r := p.NATRuleset(3)
	for _, want := range []string{
		"table ip sptb_nat {\n",
		"type nat hook prerouting priority dstnat; policy accept;\n",
		`iifname "eth0" ip daddr 10.213.0.4 tcp dport 8080 dnat to 192.168.0.2:8080` + "\n",
		"type nat hook postrouting priority srcnat; policy accept;\n",
		`oifname "eth0" ip saddr 192.168.0.0/24 masquerade` + "\n",
		`iifname "eth0" oifname "sptb-0a1fn3" ct state established,related accept` + "\n",
		`iifname "eth0" oifname "sptb-0a1fn3" ct status dnat accept` + "\n",
		"type filter hook input priority filter; policy accept;\n",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, r)
		}
	}
	// The only port let in is the status port, and what else comes in from
	// the bridge is dropped, in the forward chain and the input chain.
	if strings.Count(r, "dport") != 1 || strings.Count(r, "dnat to") != 1 {
		t.Errorf("more than the status port forwarded:\n%s", r)
	}
	if strings.Count(r, `iifname "eth0" drop`) != 2 {
		t.Errorf("unasked traffic not dropped in forward and input:\n%s", r)
	}
	if strings.Count(r, "{") != strings.Count(r, "}") {
		t.Errorf("unbalanced braces:\n%s", r)
	}
}

// TestPlan_Hosts: the bed's hosts file names every public peer at its
// address and no NAT'd one, under a name go-libp2p counts as public.
func TestPlan_Hosts(t *testing.T) {
	p := natPlan(t, TUN)
	h := p.Hosts()
	for i := 0; i < p.N; i++ {
		line := p.Addr(i).String() + "\t" + p.HostName(i) + "\n"
		if got := strings.Contains(h, line); got == p.NATed(i) {
			t.Errorf("peer %d (NAT'd %v): line %q in the hosts file: %v\n%s", i, p.NATed(i), line, got, h)
		}
		a, err := ma.NewMultiaddr("/dns4/" + p.HostName(i) + "/tcp/4001")
		if err != nil || !manet.IsPublicAddr(a) {
			t.Errorf("peer %d: %s is not a public address to go-libp2p (%v)", i, a, err)
		}
	}
	if !strings.HasPrefix(h, "127.0.0.1\tlocalhost\n") {
		t.Errorf("hosts file without localhost:\n%s", h)
	}
}
