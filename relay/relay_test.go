package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// publicName is the DNS name the tests' relays advertise beside 127.0.0.1
// and every test host resolves to 127.0.0.1: AutoRelay builds /p2p-circuit
// addresses from a relay's public addresses only, and a name outside the
// reserved private and local domains counts as one.
const publicName = "relays.superpeer.example"

// loopbackResolver resolves publicName to 127.0.0.1 and nothing else.
type loopbackResolver struct{}

func (loopbackResolver) ResolveDNSAddr(context.Context, peer.ID, ma.Multiaddr, int, int) ([]ma.Multiaddr, error) {
	return nil, errors.New("test resolver: no dnsaddr")
}

func (loopbackResolver) ResolveDNSComponent(_ context.Context, a ma.Multiaddr, _ int) ([]ma.Multiaddr, error) {
	if len(a) == 0 || a[0].Value() != publicName {
		return nil, fmt.Errorf("test resolver: %s: not %s", a, publicName)
	}
	return []ma.Multiaddr{ma.Join(ma.StringCast("/ip4/127.0.0.1"), a[1:])}, nil
}

// publicAlias adds /dns4/publicName/tcp/P to every /ip4/127.0.0.1/tcp/P.
func publicAlias(addrs []ma.Multiaddr) []ma.Multiaddr {
	out := slices.Clone(addrs)
	for _, a := range addrs {
		if len(a) >= 2 && a[0].Code() == ma.P_IP4 && a[0].Value() == "127.0.0.1" {
			out = append(out, ma.Join(ma.StringCast("/dns4/"+publicName), a[1:]))
		}
	}
	return out
}

// member is one peer of a test network.
type member struct {
	h    host.Host
	node *dht.Node
	sel  *superpeer.PrefixSelector
	svc  *Service // public peers
	src  *Source  // NAT'd peers
}

// overlay is a test network: public peers that may be superpeers and
// relay, and NAT'd ones (no listen address, reachability private,
// AutoRelay fed by a Source) that never are: every peer runs the prefix
// method with an ID puzzle the public identities solve and the NAT'd ones
// fail.
type overlay struct {
	t        *testing.T
	ctx      context.Context
	rng      *rand.Rand
	S, c     int
	pub, nat []*member
}

const puzzle = 3

func newOverlay(t *testing.T, seed int64, S, capacity, public, natted int) *overlay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := &overlay{t: t, ctx: ctx, rng: rand.New(rand.NewSource(seed)), S: S, c: capacity}
	// Hosts first: a NAT'd host's AutoRelay asks its source at once, and
	// the source, unbound, offers nothing until its next call.
	for range natted {
		o.nat = append(o.nat, o.natHost())
	}
	for range public {
		sk, _, err := superpeer.PuzzleKey(o.rng, puzzle)
		if err != nil {
			t.Fatal(err)
		}
		o.pub = append(o.pub, o.publicHost(sk))
	}
	boot := peer.AddrInfo{ID: o.pub[0].h.ID(), Addrs: o.pub[0].h.Addrs()}
	for _, m := range append(slices.Clone(o.pub), o.nat...) {
		o.node(m)
	}
	for _, m := range append(slices.Clone(o.pub[1:]), o.nat...) {
		if err := m.node.Join(ctx, boot); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range append(slices.Clone(o.pub), o.nat...) {
		if err := m.node.SelfLookup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range o.pub {
		o.start(m)
	}
	for _, m := range o.nat {
		o.start(m)
	}
	return o
}

func (o *overlay) publicHost(sk crypto.PrivKey) *member {
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ForceReachabilityPublic(),
		libp2p.AddrsFactory(publicAlias), libp2p.MultiaddrResolver(loopbackResolver{}))
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() {
		// The NAT'd hosts go first: their AutoRelay, seeing its relays
		// disconnect one after another, races with itself (go-libp2p
		// v0.51's relay finder reads its relays without their lock in
		// maybeConnectToRelay), which the race detector reports.
		for _, n := range o.nat {
			n.h.Close()
		}
		h.Close()
	})
	return &member{h: h}
}

func (o *overlay) natHost() *member {
	var sk crypto.PrivKey
	for {
		k, _, err := crypto.GenerateEd25519Key(o.rng)
		if err != nil {
			o.t.Fatal(err)
		}
		if id, _ := peer.IDFromPrivateKey(k); !superpeer.SolvesPuzzle(id, puzzle) {
			sk = k
			break
		}
	}
	src := NewSource()
	// libp2p.EnableAutoRelay is deprecated for the two spellings below,
	// but it is the one that takes AutoRelayOptions(src) as they are.
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.NoListenAddrs, libp2p.EnableRelay(),
		libp2p.NoTransports, libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ForceReachabilityPrivate(),
		libp2p.EnableAutoRelay(AutoRelayOptions(src)...),
		libp2p.MultiaddrResolver(loopbackResolver{}))
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { h.Close() })
	return &member{h: h, src: src}
}

func (o *overlay) node(m *member) {
	node, err := dht.New(o.ctx, m.h, dht.WithRoutingTableRefresh(0))
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { node.Close() })
	m.node = node
}

// start builds and starts m's selector as `peer run` does, and its relay
// service (public) or binds its source (NAT'd).
func (o *overlay) start(m *member) {
	meth, err := superpeer.Lookup("prefix")
	if err != nil {
		o.t.Fatal(err)
	}
	sel, err := meth.New(m.node, superpeer.Env{
		Superpeers: o.S,
		Attach:     []superpeer.Option{superpeer.WithCapacity(o.c), superpeer.WithTTL(3 * time.Second)},
		Options: []superpeer.Option{superpeer.WithIDPuzzle(puzzle), superpeer.WithRecheck(2 * time.Second),
			superpeer.WithMinRecheck(50 * time.Millisecond), superpeer.WithStartSpread(300 * time.Millisecond)},
	})
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { sel.Close() })
	m.sel = sel.(*superpeer.PrefixSelector)
	if m.src != nil {
		m.src.Bind(m.h, sel)
	} else {
		svc, err := Serve(m.h, sel)
		if err != nil {
			o.t.Fatal(err)
		}
		o.t.Cleanup(func() { svc.Close() })
		m.svc = svc
	}
	if err := sel.Start(o.ctx); err != nil {
		o.t.Fatal(err)
	}
}

// byID is the public member with ID p (nil if none).
func (o *overlay) byID(p peer.ID) *member {
	for _, m := range o.pub {
		if m.h.ID() == p {
			return m
		}
	}
	return nil
}

// waitFor polls cond every 50 ms until it returns "" (holds), failing the
// test with its last answer after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, why)
		}
		<-tick.C
	}
}

// relayedBy reports why the NAT'd peers do not all hold a reservation with
// their own superpeer yet ("" once they do).
func (o *overlay) relayedBy() string {
	for i, m := range o.nat {
		sp := m.sel.Superpeer()
		if sp == "" || sp == m.h.ID() {
			return fmt.Sprintf("NAT'd peer %d: %s served by %q", i, m.sel.Role(), sp)
		}
		if held := Held(m.h); !slices.Contains(held, sp) {
			return fmt.Sprintf("NAT'd peer %d holds %v, not its superpeer %s", i, held, sp)
		}
	}
	return ""
}

// serving reports why the public peers' services do not match their roles
// yet: a superpeer's runs with the attach capacity and a reservation from
// each NAT'd peer it serves; another's does not run.
func (o *overlay) serving() string {
	for i, m := range o.pub {
		st := m.svc.Stats()
		if m.sel.Role() != superpeer.Superpeer {
			if st.Running || m.svc.Running() {
				return fmt.Sprintf("public peer %d is a %s with its relay running", i, m.sel.Role())
			}
			continue
		}
		served := 0
		for _, n := range o.nat {
			if n.sel.Superpeer() == m.h.ID() {
				served++
			}
		}
		if !st.Running || st.Capacity != o.c || st.Reservations < served {
			return fmt.Sprintf("superpeer %d (%s) serves %d NAT'd peers; its relay: %+v", i, m.h.ID(), served, st)
		}
	}
	return ""
}

// Six public peers and two NAT'd ones, S = 3: each NAT'd peer holds a
// reservation with its own superpeer (Held), each superpeer's relay runs
// with the attach capacity and those reservations and no other public
// peer's runs, and one NAT'd peer pings the other through the other's
// /p2p-circuit address, relayed by the other's superpeer.
func TestRelay_NATdPeersHoldTheirSuperpeer(t *testing.T) {
	const S, capacity = 3, 8
	o := newOverlay(t, 1, S, capacity, 6, 2)
	start := time.Now()
	waitFor(t, 20*time.Second, func() string {
		if why := o.relayedBy(); why != "" {
			return why
		}
		return o.serving()
	})
	t.Logf("every NAT'd peer relayed by its superpeer after %.1f s", time.Since(start).Seconds())
	for i, m := range o.nat {
		t.Logf("NAT'd peer %d: superpeer %s, holds %v", i, m.sel.Superpeer(), Held(m.h))
	}

	a, b := o.nat[0], o.nat[1]
	spB := b.sel.Superpeer()
	var through []ma.Multiaddr
	for _, addr := range b.h.Addrs() {
		if relayOf(addr) == spB {
			through = append(through, addr)
		}
	}
	if len(through) == 0 {
		t.Fatalf("NAT'd peer 1 advertises no address through %s: %v", spB, b.h.Addrs())
	}
	// Only the address through b's superpeer: no other path the DHT may
	// have taught a.
	_ = a.h.Network().ClosePeer(b.h.ID())
	a.h.Peerstore().ClearAddrs(b.h.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rtts, via, err := Ping(ctx, a.h, peer.AddrInfo{ID: b.h.ID(), Addrs: through}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(rtts) != 3 || via != spB {
		t.Fatalf("ping through %s: %d RTTs via %q", spB, len(rtts), via)
	}
	if st := o.byID(spB).svc.Stats(); st.CircuitsTotal < 1 {
		t.Fatalf("the relay of the ping counted no circuit: %+v", st)
	}
	t.Logf("NAT'd peer 0 → 1 via %s: %v", via, rtts)
}

// Capacity 1 at the one superpeer (S = 1) and two NAT'd peers asking it:
// at no time do both hold a reservation there, its relay refuses one, and
// one is held.
func TestRelay_CapacityBoundsReservations(t *testing.T) {
	const S, capacity = 1, 1
	o := newOverlay(t, 2, S, capacity, 3, 2)
	// Every NAT'd peer knows every public one (and so, by identify, which
	// of them relays), served by the superpeer or not.
	for _, n := range o.nat {
		for _, p := range o.pub {
			if err := n.h.Connect(o.ctx, peer.AddrInfo{ID: p.h.ID(), Addrs: p.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 20*time.Second, func() string {
		var sp *member
		for _, m := range o.pub {
			if m.sel.Role() == superpeer.Superpeer {
				sp = m
			}
		}
		if sp == nil {
			return "no superpeer yet"
		}
		holders := 0
		for _, n := range o.nat {
			if slices.Contains(Held(n.h), sp.h.ID()) {
				holders++
			}
		}
		st := sp.svc.Stats()
		if holders > 1 || st.Reservations > 1 {
			t.Fatalf("capacity 1: %d NAT'd peers hold a reservation with the superpeer; its relay: %+v", holders, st)
		}
		if holders != 1 || st.Reservations != 1 || st.ReservationsRefused < 1 || st.Capacity != capacity {
			return fmt.Sprintf("%d holders; the superpeer's relay: %+v", holders, st)
		}
		return ""
	})
}

// The superpeer steps down when a public peer nearer the group key (and
// solving the puzzle) joins: its relay stops, the newcomer's starts, and
// the NAT'd peer lets the old relay go and holds the new superpeer.
func TestRelay_FollowsAStepDown(t *testing.T) {
	const S, capacity = 1, 8
	o := newOverlay(t, 3, S, capacity, 3, 1)
	n := o.nat[0]
	waitFor(t, 20*time.Second, func() string {
		if why := o.relayedBy(); why != "" {
			return why
		}
		return o.serving()
	})
	old := o.byID(n.sel.Superpeer())
	gk := old.sel.Scheme().GroupKey(0)
	var sk crypto.PrivKey
	for sk == nil {
		k, _, err := superpeer.PuzzleKey(o.rng, puzzle)
		if err != nil {
			t.Fatal(err)
		}
		if id, _ := peer.IDFromPrivateKey(k); gk.Closer(dht.KeyOf(id), old.node.Key()) {
			sk = k
		}
	}
	m := o.publicHost(sk)
	o.node(m)
	if err := m.node.Join(o.ctx, peer.AddrInfo{ID: old.h.ID(), Addrs: old.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	o.pub = append(o.pub, m)
	o.start(m)
	start := time.Now()
	waitFor(t, 20*time.Second, func() string {
		if m.sel.Role() != superpeer.Superpeer || n.sel.Superpeer() != m.h.ID() {
			return fmt.Sprintf("newcomer %s, the NAT'd peer served by %s", m.sel.Role(), n.sel.Superpeer())
		}
		if held := Held(n.h); slices.Contains(held, old.h.ID()) || !slices.Contains(held, m.h.ID()) {
			return fmt.Sprintf("the NAT'd peer holds %v (old %s, new %s)", held, old.h.ID(), m.h.ID())
		}
		return o.serving()
	})
	st := old.svc.Stats()
	if st.Running || st.Capacity != 0 || st.Starts != 1 || st.Reservations != 0 {
		t.Fatalf("the old superpeer's relay: %+v", st)
	}
	t.Logf("the NAT'd peer moved to the new superpeer's relay %.1f s after it joined", time.Since(start).Seconds())
}

// stub is a selector whose role the test sets, for the Source's order and
// the Service's following without a network.
type stub struct {
	note   superpeer.Notifier
	attach *superpeer.Attach
}

func (s *stub) Start(context.Context) error { return nil }
func (s *stub) Role() superpeer.Role        { r, _ := s.note.State(); return r }
func (s *stub) Superpeer() peer.ID          { _, sp := s.note.State(); return sp }
func (s *stub) Subscribe() (<-chan superpeer.Change, func()) {
	return s.note.Subscribe()
}
func (s *stub) Attach() *superpeer.Attach { return s.attach }
func (s *stub) Close() error              { return nil }

func (s *stub) set(role superpeer.Role, sp peer.ID) { s.note.Set(role, sp, "test", time.Now()) }

// newHost is a host that listens nowhere, for its peerstore.
func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.NoListenAddrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// ids are n peer IDs from a seed.
func ids(t *testing.T, seed int64, n int) []peer.ID {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	var out []peer.ID
	for range n {
		sk, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func drain(ch <-chan peer.AddrInfo) []peer.ID {
	var out []peer.ID
	for ai := range ch {
		out = append(out, ai.ID)
	}
	return out
}

func addr(i int) ma.Multiaddr { return ma.StringCast(fmt.Sprintf("/ip4/10.0.0.%d/tcp/4001", i+1)) }

// The source offers the own superpeer first (relay or not), then the peers
// speaking the hop protocol nearest first by the RTT function (unknown
// RTTs last), skips those without addresses, respects num, and offers
// nothing unbound, before the selector's first decision, or while the
// peer is its own superpeer with no other relay.
func TestSource_Order(t *testing.T) {
	h := newHost(t)
	p := ids(t, 1, 7)
	own, near, mid, far, unknown, noAddrs, noHop := p[0], p[1], p[2], p[3], p[4], p[5], p[6]
	ps := h.Peerstore()
	for i, id := range p {
		if id != noAddrs {
			ps.AddAddrs(id, []ma.Multiaddr{addr(i)}, peerstore.PermanentAddrTTL)
		}
		if id != own && id != noHop {
			if err := ps.SetProtocols(id, proto.ProtoIDv2Hop); err != nil {
				t.Fatal(err)
			}
		}
	}
	rtt := map[peer.ID]time.Duration{own: 90 * time.Millisecond, near: 5 * time.Millisecond, mid: 20 * time.Millisecond,
		far: 80 * time.Millisecond, noAddrs: time.Millisecond, noHop: time.Millisecond}
	src := NewSource(WithRTT(func(p peer.ID) (time.Duration, bool) { d, ok := rtt[p]; return d, ok }), WithPace(0))
	ctx := context.Background()
	if got := drain(src.PeerSource(ctx, 10)); len(got) != 0 {
		t.Fatalf("unbound: offered %v", got)
	}
	sel := &stub{}
	src.Bind(h, sel)
	if got := drain(src.PeerSource(ctx, 10)); len(got) != 0 {
		t.Fatalf("before the first decision: offered %v", got)
	}
	sel.set(superpeer.Client, own)
	if got, want := drain(src.PeerSource(ctx, 10)), []peer.ID{own, near, mid, far, unknown}; !slices.Equal(got, want) {
		t.Fatalf("offered %v, want %v", got, want)
	}
	if got, want := drain(src.PeerSource(ctx, 3)), []peer.ID{own, near, mid}; !slices.Equal(got, want) {
		t.Fatalf("num 3: offered %v, want %v", got, want)
	}
	sel.set(superpeer.Client, "") // unserved: the relays by RTT
	if got, want := drain(src.PeerSource(ctx, 2)), []peer.ID{near, mid}; !slices.Equal(got, want) {
		t.Fatalf("unserved, num 2: offered %v, want %v", got, want)
	}
	sel.set(superpeer.Superpeer, h.ID()) // never itself
	if got, want := drain(src.PeerSource(ctx, 10)), []peer.ID{near, mid, far, unknown}; !slices.Equal(got, want) {
		t.Fatalf("a superpeer: offered %v, want %v", got, want)
	}
	// The peerstore's RTTs by default.
	def := NewSource(WithPace(0))
	def.Bind(h, sel)
	ps.RecordLatency(far, time.Millisecond)
	if got := drain(def.PeerSource(ctx, 1)); !slices.Equal(got, []peer.ID{far}) {
		t.Fatalf("by the peerstore's RTT: offered %v, want %v (the one measured)", got, []peer.ID{far})
	}
	// Paced, without AutoRelay taking any: the same peers, one at a time.
	paced := NewSource(WithRTT(func(p peer.ID) (time.Duration, bool) { d, ok := rtt[p]; return d, ok }), WithPace(time.Millisecond))
	paced.Bind(h, sel)
	if got, want := drain(paced.PeerSource(ctx, 10)), []peer.ID{near, mid, far, unknown}; !slices.Equal(got, want) {
		t.Fatalf("paced: offered %v, want %v", got, want)
	}
	// A canceled context closes a paced offer early.
	cctx, cancel := context.WithCancel(ctx)
	slow := NewSource(WithPace(time.Hour))
	slow.Bind(h, sel)
	ch := slow.PeerSource(cctx, 10)
	if _, ok := <-ch; !ok {
		t.Fatal("paced: nothing offered first")
	}
	cancel()
	for range ch {
	}
}

// The random baseline offers distinct peers with addresses, at most num,
// never this host, and the same ones in the same order for one seed.
func TestRandomSource(t *testing.T) {
	h := newHost(t)
	p := ids(t, 2, 12)
	for i, id := range p[:10] {
		h.Peerstore().AddAddrs(id, []ma.Multiaddr{addr(i)}, peerstore.PermanentAddrTTL)
	}
	// p[10] and p[11] have no address; p[3] comes twice; h itself once.
	known := func() []peer.ID { return append(slices.Clone(p), p[3], h.ID()) }
	draw := func(seed int64, calls, num int) [][]peer.ID {
		src := RandomSource(h, known, rand.New(rand.NewSource(seed)))
		var out [][]peer.ID
		for range calls {
			out = append(out, drain(src(context.Background(), num)))
		}
		return out
	}
	a := draw(7, 5, 4)
	for _, got := range a {
		seen := map[peer.ID]bool{}
		for _, id := range got {
			if seen[id] || id == h.ID() || !slices.Contains(p[:10], id) {
				t.Fatalf("drew %v: a duplicate, this host or a peer without addresses", got)
			}
			seen[id] = true
		}
		if len(got) != 4 {
			t.Fatalf("drew %d, want num = 4", len(got))
		}
	}
	if b := draw(7, 5, 4); !slices.EqualFunc(a, b, slices.Equal) {
		t.Fatalf("seed 7 drew %v, then %v", a, b)
	}
	if all := draw(7, 1, 100)[0]; len(all) != 10 {
		t.Fatalf("num 100: drew %d, want the 10 with addresses", len(all))
	}
	if c := draw(8, 5, 4); slices.EqualFunc(a, c, slices.Equal) {
		t.Logf("seeds 7 and 8 drew the same (possible, unlikely)")
	}
}

// The service follows the role: it starts on Superpeer with the attach
// capacity (or WithCapacity's) and per-IP bounds not below it, stops on
// any other role and starts again; Close stops it for good.
func TestService_FollowsTheRole(t *testing.T) {
	h := newHost(t)
	att, err := superpeer.NewAttach(h, superpeer.WithCapacity(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(att.Close)
	sel := &stub{attach: att}
	svc, err := Serve(h, sel)
	if err != nil {
		t.Fatal(err)
	}
	hop := func() bool { return slices.Contains(h.Mux().Protocols(), proto.ProtoIDv2Hop) }
	if svc.Running() || hop() {
		t.Fatal("running before any role")
	}
	if r := svc.resources(3); r.MaxReservations != 3 || r.MaxReservationsPerIP != 8 || r.MaxReservationsPerASN != 32 {
		t.Fatalf("capacity 3: %+v", r)
	}
	if r := svc.resources(50); r.MaxReservations != 50 || r.MaxReservationsPerIP != 50 || r.MaxReservationsPerASN != 50 {
		t.Fatalf("capacity 50: %+v", r)
	}
	for round := uint64(1); round <= 2; round++ {
		sel.set(superpeer.Superpeer, h.ID())
		waitFor(t, 5*time.Second, func() string {
			if st := svc.Stats(); !st.Running || st.Capacity != 3 || st.Starts != round || !hop() {
				return fmt.Sprintf("a superpeer (round %d): %+v, hop handler %v", round, st, hop())
			}
			return ""
		})
		sel.set(superpeer.Client, "")
		waitFor(t, 5*time.Second, func() string {
			if st := svc.Stats(); st.Running || st.Capacity != 0 || hop() {
				return fmt.Sprintf("a client (round %d): %+v, hop handler %v", round, st, hop())
			}
			return ""
		})
	}
	sel.set(superpeer.Superpeer, h.ID())
	waitFor(t, 5*time.Second, func() string {
		if !svc.Running() {
			return "not running"
		}
		return ""
	})
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if svc.Running() || hop() {
		t.Fatal("running after Close")
	}
	_ = svc.Close()

	// Running from the start on a superpeer; WithCapacity overrides.
	own, err := Serve(h, sel, WithCapacity(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { own.Close() })
	if st := own.Stats(); !st.Running || st.Capacity != 5 || st.Starts != 1 {
		t.Fatalf("WithCapacity(5) on a superpeer: %+v", st)
	}
	// The options: WithLimit over WithResources' limit, whatever the order.
	rc := relayv2.DefaultResources()
	rc.ReservationTTL, rc.MaxReservationsPerIP = time.Minute, 2
	idle, err := Serve(h, &stub{}, WithLimit(nil), WithResources(rc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idle.Close() })
	if r := idle.resources(4); r.Limit != nil || r.ReservationTTL != time.Minute || r.MaxReservations != 4 || r.MaxReservationsPerIP != 4 {
		t.Fatalf("WithLimit(nil), WithResources: %+v", r)
	}
	if idle.Running() {
		t.Fatal("running before any role")
	}
	if _, err := Serve(h, sel, WithCapacity(0)); !errors.Is(err, ErrConfig) {
		t.Fatalf("WithCapacity(0): %v", err)
	}
	if _, err := Serve(nil, sel); !errors.Is(err, ErrConfig) {
		t.Fatalf("no host: %v", err)
	}
}

// Ping says what is wrong before it pings: no address, a connection
// refused.
func TestPing_Errors(t *testing.T) {
	h := newHost(t)
	other := ids(t, 3, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := Ping(ctx, h, peer.AddrInfo{ID: other}, 1); err == nil || !contains(err, "no address") {
		t.Fatalf("no address: %v", err)
	}
	if _, _, err := Ping(ctx, h, peer.AddrInfo{ID: other, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}}, 1); err == nil || !contains(err, "connect") {
		t.Fatalf("nobody listening: %v", err)
	}
	if got := relayOf(ma.StringCast("/ip4/1.2.3.4/tcp/1/p2p/" + other.String() + "/p2p-circuit")); got != other {
		t.Fatalf("relayOf: %q", got)
	}
	if got := relayOf(ma.StringCast("/ip4/1.2.3.4/tcp/1")); got != "" {
		t.Fatalf("relayOf of a direct address: %q", got)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestSource_ProbesUnknownRTTs: a paced source with the peerstore's RTTs
// pings the relays it does not know an RTT to after its first offer, and
// offers them nearest first: here the one behind a slower link second.
func TestSource_ProbesUnknownRTTs(t *testing.T) {
	h := newHost(t)
	near, slow := tcpHost(t), tcpHost(t)
	// slow answers its pings 60 ms late.
	slow.SetStreamHandler(ping.ID, func(s network.Stream) {
		defer s.Close()
		buf := make([]byte, 32)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			time.Sleep(60 * time.Millisecond)
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	})
	ps := h.Peerstore()
	for _, r := range []host.Host{near, slow} {
		ps.AddAddrs(r.ID(), r.Addrs(), peerstore.PermanentAddrTTL)
		if err := ps.SetProtocols(r.ID(), proto.ProtoIDv2Hop); err != nil {
			t.Fatal(err)
		}
	}
	own := ids(t, 1, 1)[0]
	ps.AddAddrs(own, []ma.Multiaddr{addr(0)}, peerstore.PermanentAddrTTL)
	sel := &stub{}
	sel.set(superpeer.Client, own)
	src := NewSource(WithPace(time.Millisecond))
	src.Bind(h, sel)
	// By ID order slow may come first; measured, near does.
	if got, want := drain(src.PeerSource(context.Background(), 10)), []peer.ID{own, near.ID(), slow.ID()}; !slices.Equal(got, want) {
		t.Fatalf("offered %v, want %v", got, want)
	}
	if dn, ds := ps.LatencyEWMA(near.ID()), ps.LatencyEWMA(slow.ID()); dn == 0 || ds < 60*time.Millisecond || dn >= ds {
		t.Errorf("probed RTTs: near %v, slow %v", dn, ds)
	}
}
