package superpeer

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
)

// prefixPeer is one live peer of a prefix test: its DHT node and selector.
type prefixPeer struct {
	node *dht.Node
	sel  *PrefixSelector
	dead bool
}

// prefixNet starts n peers with seeded keys on a fully linked mocknet,
// joined into one DHT, each running a prefix selector with opts.
func prefixNet(t *testing.T, n int, seed int64, opts options) []*prefixPeer {
	peers, _ := prefixNetJoin(t, n, seed, opts)
	return peers
}

// prefixNetJoin is prefixNet, and a function that adds a peer to the
// network later: the first key from the seed's source that accept takes,
// on a host linked to all, joined into the DHT, its selector built with
// opts but not started.
func prefixNetJoin(t *testing.T, n int, seed int64, opts options) ([]*prefixPeer, func(accept func(dht.Key) bool, opts options) *prefixPeer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	rng := rand.New(rand.NewSource(seed))
	newPeer := func(i int, sk crypto.PrivKey) *prefixPeer {
		h, err := mn.AddPeer(sk, ma.StringCast(fmt.Sprintf("/ip4/10.0.%d.%d/tcp/4001", i>>8, i&255)))
		if err != nil {
			t.Fatal(err)
		}
		node, err := dht.New(ctx, h, dht.WithRoutingTableRefresh(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		return &prefixPeer{node: node}
	}
	key := func() crypto.PrivKey {
		sk, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			t.Fatal(err)
		}
		return sk
	}
	selector := func(p *prefixPeer, opts options) {
		sel, err := NewPrefix(p.node, prefixWith(opts))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sel.Close() })
		p.sel = sel
	}
	peers := make([]*prefixPeer, n)
	for i := range peers {
		peers[i] = newPeer(i, key())
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		b := peers[rng.Intn(i)].node
		if err := peers[i].node.Join(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
			t.Fatalf("peer %d join: %v", i, err)
		}
	}
	for _, p := range peers {
		if err := p.node.SelfLookup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range peers {
		selector(p, opts)
		if err := p.sel.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	joined := n
	join := func(accept func(dht.Key) bool, opts options) *prefixPeer {
		t.Helper()
		sk := key()
		for {
			id, err := peer.IDFromPrivateKey(sk)
			if err != nil {
				t.Fatal(err)
			}
			if accept(dht.KeyOf(id)) {
				break
			}
			sk = key()
		}
		p := newPeer(joined, sk)
		joined++
		if err := mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		b := peers[rng.Intn(len(peers))].node
		if err := p.node.Join(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
			t.Fatalf("joiner: %v", err)
		}
		if err := p.node.SelfLookup(ctx); err != nil {
			t.Fatal(err)
		}
		selector(p, opts)
		return p
	}
	return peers, join
}

// prefixOutcome is what the peers' keys call for: per occupied group the
// live member XOR-closest to its group key.
func prefixOutcome(peers []*prefixPeer, scheme Prefix) map[int]*prefixPeer {
	best := map[int]*prefixPeer{}
	for _, p := range peers {
		if p.dead {
			continue
		}
		if e := p.sel.eligible; e != nil && !e(p.node.ID()) {
			continue // WithIDPuzzle: a client only
		}
		g := scheme.Group(p.node.Key())
		if b, ok := best[g]; !ok || scheme.GroupKey(g).Closer(p.node.Key(), b.node.Key()) {
			best[g] = p
		}
	}
	return best
}

// prefixSettled says what is still wrong, or "": every live peer's
// superpeer is the one its group calls for (or, with capacity, another
// group's when its own is full), and the superpeers serve exactly their
// clients, within capacity.
func prefixSettled(peers []*prefixPeer, capacity int) string {
	scheme := peers[0].sel.Scheme()
	for _, p := range peers {
		if got := p.sel.Scheme(); !p.dead && got != scheme {
			return fmt.Sprintf("%s holds another code than %s", p.node.ID(), peers[0].node.ID())
		}
	}
	want := prefixOutcome(peers, scheme)
	byID := map[peer.ID]*prefixPeer{}
	served := map[peer.ID][]peer.ID{}
	for _, p := range peers {
		if !p.dead {
			byID[p.node.ID()] = p
		}
	}
	for _, p := range peers {
		if p.dead {
			continue
		}
		home := want[scheme.Group(p.node.Key())]
		role, sp := p.sel.Role(), p.sel.Superpeer()
		switch {
		case home == p:
			if role != Superpeer || sp != p.node.ID() {
				return fmt.Sprintf("%s is %v served by %s, want superpeer", p.node.ID(), role, sp)
			}
		case role != Client || sp == "":
			return fmt.Sprintf("%s is %v served by %q, want a client", p.node.ID(), role, sp)
		case sp != home.node.ID():
			at, ok := byID[sp]
			if capacity == 0 || !ok || at.sel.Role() != Superpeer {
				return fmt.Sprintf("%s is served by %s, its group's superpeer is %s", p.node.ID(), sp, home.node.ID())
			}
			if l := home.sel.Attach().Load(); l < capacity {
				return fmt.Sprintf("%s is served away from home, where %d of %d places are taken", p.node.ID(), l, capacity)
			}
			served[sp] = append(served[sp], p.node.ID())
		default:
			served[sp] = append(served[sp], p.node.ID())
		}
	}
	for _, p := range want {
		got := p.sel.Attach().Clients()
		w := served[p.node.ID()]
		slices.Sort(w)
		if !slices.Equal(got, w) {
			return fmt.Sprintf("superpeer %s serves %v, its clients are %v", p.node.ID(), got, w)
		}
		if capacity > 0 && len(got) > capacity {
			return fmt.Sprintf("superpeer %s serves %d > %d", p.node.ID(), len(got), capacity)
		}
	}
	return ""
}

// waitSettled polls until prefixSettled holds.
func waitSettled(t *testing.T, peers []*prefixPeer, capacity int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		why := prefixSettled(peers, capacity)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %v: %s", limit, why)
		}
		<-tick.C
	}
}

func livePrefixOptions(S, capacity int) options {
	return options{
		Superpeers:  S,
		Recheck:     2 * time.Second,
		MinRecheck:  50 * time.Millisecond,
		StartSpread: 300 * time.Millisecond,
		Attach:      attachOptions{Capacity: capacity, TTL: 1500 * time.Millisecond},
	}
}

// On a dozen real hosts the selectors elect exactly the XOR-closest peer of
// every group and attach every other peer to it; when a superpeer dies,
// its group's next-closest takes over and its clients follow.
func TestPrefixSelector_ElectsTheClosestAndRecovers(t *testing.T) {
	const n, S = 12, 3
	peers := prefixNet(t, n, 1, livePrefixOptions(S, 0))
	waitSettled(t, peers, 0, 20*time.Second)
	scheme := peers[0].sel.Scheme()
	want := prefixOutcome(peers, scheme)
	if len(want) != S {
		t.Fatalf("%d groups occupied, want all %d (choose another seed)", len(want), S)
	}
	// Kill the superpeer of the most crowded group.
	size := map[int]int{}
	for _, p := range peers {
		size[scheme.Group(p.node.Key())]++
	}
	g := 0
	for h := range size {
		if size[h] > size[g] || (size[h] == size[g] && h < g) {
			g = h
		}
	}
	if size[g] < 3 {
		t.Fatalf("largest group has %d peers", size[g])
	}
	dead := want[g]
	dead.dead = true
	dead.sel.Close()
	dead.node.Close()
	dead.node.Host().Close()
	waitSettled(t, peers, 0, 20*time.Second)
	if now := prefixOutcome(peers, scheme)[g]; now == dead || now.sel.Role() != Superpeer {
		t.Fatalf("group %d: superpeer %s after %s died", g, now.node.ID(), dead.node.ID())
	}
	total := uint64(0)
	for _, p := range peers {
		total += p.sel.Lookups()
	}
	t.Logf("%d lookups in all", total)
}

// With a capacity below the largest group, the clients that do not fit are
// served by other groups' superpeers and nobody is left out.
func TestPrefixSelector_OverflowsWhenFull(t *testing.T) {
	const n, S, C = 16, 4, 4
	peers := prefixNet(t, n, 2, livePrefixOptions(S, C))
	scheme := peers[0].sel.Scheme()
	size := map[int]int{}
	for _, p := range peers {
		size[scheme.Group(p.node.Key())]++
	}
	fits, over := 0, false
	for _, s := range size {
		fits += C
		over = over || s-1 > C
	}
	if !over || fits < n-len(size) {
		t.Fatalf("groups %v: with capacity %d, want some overflow and room for all (choose another seed)", size, C)
	}
	waitSettled(t, peers, C, 20*time.Second)
}

// With WithFraction the peers, started with S = 2, agree on S = f·n (24
// peers, f = 1/4: 6) by the census, and the selection settles on that code;
// when half the peers die the count follows down to 3.
func TestPrefixSelector_FractionFollowsTheNetwork(t *testing.T) {
	const n = 24
	o := livePrefixOptions(2, 0)
	o.Fraction = 0.25
	// Reports live 30 exchange intervals: under -race on a loaded machine
	// (CI beside a live swarm) 2 s let them expire between exchanges and
	// the tables never held enough to propose.
	o.census = censusTiming{every: 200 * time.Millisecond, holdDown: time.Second, expire: 6 * time.Second, confirmFor: time.Second}
	peers, join := prefixNetJoin(t, n, 4, o)
	capacity := peers[0].sel.Attach().Capacity()
	if capacity != 8 {
		t.Fatalf("capacity %d, want 2⌈1/f⌉ = 8", capacity)
	}
	agreed := func(S int, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			why := ""
			for _, p := range peers {
				if !p.dead && p.sel.Scheme().Groups() != S {
					why = fmt.Sprintf("%s holds S = %d", p.node.ID(), p.sel.Scheme().Groups())
					break
				}
			}
			if why == "" {
				why = prefixSettled(peers, capacity)
			}
			if why == "" {
				return
			}
			if time.Now().After(deadline) {
				for _, p := range peers {
					if p.dead {
						continue
					}
					p.sel.box.mu.Lock()
					n, k := p.sel.box.c.Size(time.Now())
					v := p.sel.box.c.Value()
					p.sel.box.mu.Unlock()
					t.Logf("%s %v load %d: %v, size %.1f from %d reports", p.node.ID(), p.sel.Role(), p.sel.Attach().Load(), v, n, k)
				}
				t.Fatalf("not at S = %d after %v: %s", S, limit, why)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	agreed(6, time.Minute)
	// A peer that joins now, starting from S = 2 as the others did, takes
	// the network's count from its routing-table peers before its first
	// step: the first superpeer it attaches to is its group's under S = 6,
	// never the one its initial code would have sent it to (the joiner is
	// one for which the two differ).
	at := func(S int, k dht.Key) *prefixPeer {
		scheme, err := Exact(S)
		if err != nil {
			t.Fatal(err)
		}
		g := scheme.Group(k)
		var best *prefixPeer
		for _, p := range peers {
			if !p.dead && scheme.Group(p.node.Key()) == g && (best == nil || scheme.GroupKey(g).Closer(p.node.Key(), best.node.Key())) {
				best = p
			}
		}
		return best
	}
	j := join(func(k dht.Key) bool {
		now, initial := at(6, k), at(2, k)
		six, _ := Exact(6)
		// Not a superpeer under either code, and sent elsewhere by each.
		return now != nil && initial != nil && now != initial &&
			six.GroupKey(six.Group(k)).Closer(now.node.Key(), k)
	}, o)
	want := at(6, j.node.Key())
	changes, unsubscribe := j.sel.Subscribe()
	jctx, jcancel := context.WithCancel(context.Background())
	t.Cleanup(jcancel)
	if err := j.sel.Start(jctx); err != nil {
		t.Fatal(err)
	}
	first := time.NewTimer(time.Minute)
	for got := false; !got; {
		select {
		case c := <-changes:
			if c.Superpeer == "" {
				continue
			}
			if c.Superpeer != want.node.ID() {
				t.Fatalf("the joiner first attached to %s (%s), not its group's superpeer under S = 6, %s", c.Superpeer, c.Reason, want.node.ID())
			}
			got = true
		case <-first.C:
			t.Fatalf("the joiner attached to nobody in a minute (holds S = %d)", j.sel.Scheme().Groups())
		}
	}
	unsubscribe()
	peers = append(peers, j)
	agreed(6, time.Minute)
	// Garbage on the census protocol is refused and counted; the peer
	// answers a good exchange after it.
	target := peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := peers[2].node.Host().NewStream(ctx, target.node.ID(), target.sel.census)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = st.Write([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
	_ = st.CloseWrite()
	_, _ = io.ReadAll(st)
	deadline := time.Now().Add(10 * time.Second)
	for target.sel.Attach().Drops()[dropCensusDecode] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("garbage not counted: drops %v", target.sel.Attach().Drops())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := peers[2].sel.Attach().exchangeCensus(ctx, peers[2].sel.census, target.node.ID(), peers[2].sel.box); err != nil {
		t.Fatalf("a good exchange after the garbage: %v", err)
	}
	for i, p := range peers {
		if i%2 == 1 {
			p.dead = true
			p.sel.Close()
			p.node.Close()
			p.node.Host().Close()
		}
	}
	agreed(3, time.Minute)
}

// WithIDPuzzle: a peer whose identity falls short of the puzzle is never a
// superpeer, even when it is its group's XOR-closest member; the nearest
// member that solves it serves the group instead.
func TestPrefixSelector_PuzzleKeepsUnsolvedIdentitiesClients(t *testing.T) {
	const n, S, c = 14, 2, 2
	opts := livePrefixOptions(S, 0)
	opts.Puzzle = c
	peers := prefixNet(t, n, 4, opts)
	scheme := peers[0].sel.Scheme()
	passedOver := 0
	for g, sp := range prefixOutcome(peers, scheme) {
		for _, p := range peers {
			if scheme.Group(p.node.Key()) == g && scheme.GroupKey(g).Closer(p.node.Key(), sp.node.Key()) {
				passedOver++ // nearer than the superpeer, but no solution
			}
		}
	}
	if len(prefixOutcome(peers, scheme)) != S || passedOver == 0 {
		t.Fatalf("seed: %d groups with a solver, %d nearer peers without: choose another seed", len(prefixOutcome(peers, scheme)), passedOver)
	}
	waitSettled(t, peers, 0, 20*time.Second)
	for _, p := range peers {
		if p.sel.Role() == Superpeer && !SolvesPuzzle(p.node.ID(), c) {
			t.Errorf("%s is a superpeer with %d puzzle bits", p.node.ID(), PuzzleBits(p.node.ID()))
		}
	}
	t.Logf("%d peers nearer their group key than its superpeer passed over", passedOver)
}

// WithSalt: every peer takes a new salt at its next step, and each group's
// superpeer becomes the member nearest the group's new key.
func TestPrefixSelector_NewSaltReselects(t *testing.T) {
	const n, S = 14, 3
	var salt atomic.Uint32
	opts := livePrefixOptions(S, 0)
	opts.Salt = func(time.Time) [32]byte { return [32]byte{byte(salt.Load())} }
	peers := prefixNet(t, n, 5, opts)
	waitSettled(t, peers, 0, 20*time.Second)
	before := prefixOutcome(peers, peers[0].sel.Scheme())
	if s, ok := peers[0].sel.Scheme().Salt(); !ok || s != [32]byte{} {
		t.Fatalf("scheme salt %v, %v", s[:1], ok)
	}
	salt.Store(1)
	start := time.Now()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s, _ := peers[0].sel.Scheme().Salt()
		why := prefixSettled(peers, 0)
		if s == [32]byte{1} && why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled under the new salt (peer 0 holds %v): %s", s[:1], why)
		}
	}
	scheme := peers[0].sel.Scheme()
	after := prefixOutcome(peers, scheme)
	moved := 0
	for g := range after {
		if after[g] != before[g] {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no group's superpeer moved with the salt: choose another seed")
	}
	t.Logf("new salt: %d of %d groups moved their superpeer, settled in %v", moved, S, time.Since(start).Round(10*time.Millisecond))
}
