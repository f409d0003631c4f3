package repel

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// siteNode is a holder of token 0 (epoch 1) at x = 0 with a client beside
// it and a candidate 50 ms away; token 1 (epoch 2, so it beats token 0) is
// held by "b", whose coordinate puts it 300 ms away. By the coordinates
// token 0 is well placed and stays.
func siteNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.0001} }
	a := mustNode(t, "a", cfg)
	a.SetCoord(c(0))
	a.SetPeers([]Peer{
		{ID: "n1", Key: PeerKey("n1"), Coord: c(-0.001)},
		{ID: "far", Key: PeerKey("far"), Coord: c(0.05)},
	})
	holderOf(t, a, 0, 1)
	b := Token{ID: 1, Epoch: 2, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0.3)}
	if _, err := a.Step(at(0), Message{Type: MsgAnnounce, From: "b", Token: b}); err != nil {
		t.Fatal(err)
	}
	return a
}

// tickFor ticks n every 250 ms over (from, to] and returns the first move
// offer, the ready that carried it, and every probe asked for.
func tickFor(n *Node, from, to float64) (offer *Message, r Ready, probes []string) {
	for s := from + 0.25; s <= to; s += 0.25 {
		r = n.Tick(at(s))
		probes = append(probes, r.Probes...)
		if m := msgs(r, MsgMove); len(m) > 0 {
			return &m[0], r, probes
		}
	}
	return nil, Ready{}, probes
}

// TestNode_SiteShared: a holder that measures the holder of a fresher token
// within SiteRTT — both at one site, whatever their coordinates say — moves
// its token away; measured farther, or with the rule off, it stays.
func TestNode_SiteShared(t *testing.T) {
	cfg := testConfig(2, Attract)
	cfg.SiteRTT = 2 * time.Millisecond

	a := siteNode(t, cfg)
	offer, _, probes := tickFor(a, 0, 4)
	if offer != nil {
		t.Fatalf("moved with no measurement: %+v", offer)
	}
	// It asks for b once, and again only once the unanswered ask is
	// MoveTimeout (1 s) old: over 4 s, 4 asks.
	if len(probes) != 4 || slices.ContainsFunc(probes, func(p string) bool { return p != "b" }) {
		t.Fatalf("probes %v, want b every MoveTimeout", probes)
	}
	a.Measured(at(4), "b", 300*time.Microsecond, true)
	offer, r, probes := tickFor(a, 4, 8)
	if offer == nil || offer.To != "far" || !hasEvent(r, EventSiteShared) {
		t.Fatalf("measured at one site with a fresher token: want a site move to far, got %+v (%+v)", offer, r.Events)
	}
	if len(probes) != 0 {
		t.Fatalf("probed again within ProbeTTL: %v", probes)
	}

	for name, c := range map[string]struct {
		cfg Config
		rtt time.Duration
	}{
		"beyond SiteRTT": {cfg, 5 * time.Millisecond},
		"rule off":       {func() Config { c := cfg; c.SiteRTT = 0; return c }(), 300 * time.Microsecond},
	} {
		a := siteNode(t, c.cfg)
		a.Measured(at(0), "b", c.rtt, true)
		if offer, r, _ := tickFor(a, 0, 8); offer != nil || hasEvent(r, EventSiteShared) {
			t.Errorf("%s: moved: %+v", name, offer)
		}
	}
}

// siteHolder is holder b (token 1, two clients) that has heard a's token 0
// at the given epoch and measured a 0.3 ms away: one site.
func siteHolder(t *testing.T, probeTTL time.Duration, epoch uint64) (*Node, Token) {
	t.Helper()
	cfg := testConfig(2, Attract)
	cfg.SiteRTT = 2 * time.Millisecond
	if probeTTL > 0 {
		cfg.ProbeTTL = probeTTL
	}
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.0001} }
	b := mustNode(t, "b", cfg)
	b.SetCoord(c(0.3))
	b.SetPeers([]Peer{
		{ID: "n2", Key: PeerKey("n2"), Coord: c(0.301)},
		{ID: "far", Key: PeerKey("far"), Coord: c(0.05)},
	})
	holderOf(t, b, 1, 2)
	other := Token{ID: 0, Epoch: epoch, Holder: "a", HolderKey: PeerKey("a"), Coord: c(0)}
	if _, err := b.Step(at(0), Message{Type: MsgAnnounce, From: "a", Token: other}); err != nil {
		t.Fatal(err)
	}
	b.Tick(at(0.25))
	b.Measured(at(0.25), "a", 300*time.Microsecond, true)
	return b, other
}

// TestNode_SiteShared_WinnerStays: of two holders at one site, only the
// one whose version loses the fencing order moves; the other keeps its
// token, and re-measures after ProbeTTL.
func TestNode_SiteShared_WinnerStays(t *testing.T) {
	b, older := siteHolder(t, 10*time.Second, 1)
	if rtt, ok := b.MeasuredRTT(at(1), "a"); !ok || rtt != 300*time.Microsecond {
		t.Fatalf("MeasuredRTT = %v, %v", rtt, ok)
	}
	offer, r, probes := tickFor(b, 0.25, 9)
	if offer != nil || hasEvent(r, EventSiteShared) {
		t.Fatalf("the fresher token moved: %+v", offer)
	}
	if len(probes) != 0 {
		t.Fatalf("probed within ProbeTTL: %v", probes)
	}
	// a's token is still live (heard again), its measurement 10 s old.
	if _, err := b.Step(at(9), Message{Type: MsgAnnounce, From: "a", Token: older}); err != nil {
		t.Fatal(err)
	}
	if _, _, probes = tickFor(b, 10, 11); !slices.Equal(probes, []string{"a"}) {
		t.Fatalf("after ProbeTTL: probes %v, want [a]", probes)
	}
}

// TestNode_SiteShared_LoserMoves is the mirror of WinnerStays: the same
// holder, measured at one site with a token that beats its own, moves.
func TestNode_SiteShared_LoserMoves(t *testing.T) {
	b, _ := siteHolder(t, 0, 3)
	offer, r, _ := tickFor(b, 0.25, 9)
	if offer == nil || !hasEvent(r, EventSiteShared) {
		t.Fatalf("the older token did not move: %+v", r)
	}
}

// TestCluster_SiteSplits: once the swarm has settled, the holders of two
// tokens turn out to be at one site (their probes measure 0.2 ms, their
// coordinates say otherwise): the holder of the older version moves its
// token away, and the swarm settles again with the two on different peers
// of which at most one is at that site.
func TestCluster_SiteSplits(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		cfg := testConfig(4, Attract)
		cfg.SiteRTT = 2 * time.Millisecond
		cfg.ProbeTTL = 5 * time.Second
		nw := newNetwork(t, cfg, 40, seed)
		nw.runUntil(t, 400, nw.exactlyS, "tokens minted")
		for range 200 { // let the first moves play out
			nw.round(250 * time.Millisecond)
		}
		h := nw.holders()
		p, q := h[0][0], h[1][0]
		older, _ := nw.nodes[p].Held()
		if other, _ := nw.nodes[q].Held(); other.Beats(older) == false {
			p, q = q, p
		}
		nw.oneSite = map[string]string{p: q}
		before := nw.events[EventSiteShared]
		for range 400 {
			nw.round(250 * time.Millisecond)
		}
		nw.quiesce()
		if nw.events[EventSiteShared] == before {
			t.Fatalf("seed %d: no site move after %s and %s measured one site", seed, p, q)
		}
		if err := nw.noDuplicates(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		_, pHolds := nw.nodes[p].Held()
		_, qHolds := nw.nodes[q].Held()
		if pHolds && qHolds {
			t.Fatalf("seed %d: %s and %s, one site, both still hold tokens", seed, p, q)
		}
		if !nw.exactlyS() {
			t.Fatalf("seed %d: holders %v", seed, nw.holders())
		}
	}
}

// TestNode_DigestMeasured: a holder measures its attached clients (after
// the other holders, at most maxProbesPerTick a Tick) and its digest points
// carry the mean measured RTT of the clients they stand for, 0 where none
// is measured.
func TestNode_DigestMeasured(t *testing.T) {
	cfg := testConfig(1, Attract)
	cfg.DigestSize = 2
	n := mustNode(t, "h", cfg)
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.0001} }
	var peers []Peer
	clients := maxProbesPerTick + 6
	for i := range clients { // two crowds, at 10 ms and at 100 ms
		id := fmt.Sprintf("c%02d", i)
		x := 0.01 + float64(i%2)*0.09 + float64(i)*1e-5
		peers = append(peers, Peer{ID: id, Key: PeerKey(id), Coord: c(x), Attached: true})
	}
	n.SetPeers(append(peers, Peer{ID: "nb", Key: PeerKey("nb"), Coord: c(0.5)}))
	holderOf(t, n, 0, 1)
	r := n.Tick(at(0.25))
	if len(r.Probes) != maxProbesPerTick || slices.Contains(r.Probes, "nb") {
		t.Fatalf("first tick probes %v, want %d attached clients", r.Probes, maxProbesPerTick)
	}
	r = n.Tick(at(0.5))
	if len(r.Probes) != clients-maxProbesPerTick {
		t.Fatalf("second tick probes %v, want the other %d", r.Probes, clients-maxProbesPerTick)
	}
	// Measured: the near crowd (even i) at 3 ms, the far one (odd i) not
	// at all.
	for i := 0; i < clients; i += 2 {
		n.Measured(at(0.5), peers[i].ID, 3*time.Millisecond, true)
	}
	ann := msgs(n.Tick(at(1.5)), MsgAnnounce)
	if len(ann) != 1 || len(ann[0].Token.Digest) != 2 {
		t.Fatalf("announcement %+v", ann)
	}
	for _, s := range ann[0].Token.Digest {
		near := s.Coord.Vec[0] < 0.05
		if near && math.Abs(s.RTT-0.003) > 1e-12 || !near && s.RTT != 0 {
			t.Fatalf("digest point at %v: RTT %v (near crowd measured 3 ms, far unmeasured)", s.Coord.Vec[0], s.RTT)
		}
	}
}

// TestNode_MeasuredDigestOverridesPrediction: a crowd that another token
// serves from afar by the coordinates draws this token (as in
// TestNode_DigestAttracts), unless that token's holder measured the crowd
// near it: then the crowd is served and this token stays.
func TestNode_MeasuredDigestOverridesPrediction(t *testing.T) {
	cfg := testConfig(2, Attract)
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.001} }
	run := func(rtt float64) *Message {
		a := mustNode(t, "a", cfg)
		a.SetCoord(c(0))
		a.SetPeers([]Peer{{ID: "n1", Key: PeerKey("n1"), Coord: c(0.002)}})
		holderOf(t, a, 0, 1)
		far := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0.2), Digest: []Sample{
			{ID: "crowd", Key: PeerKey("crowd"), Coord: c(0.1), Weight: 50, RTT: rtt},
			{ID: "b-near", Key: PeerKey("b-near"), Coord: c(0.2), Weight: 5},
		}}
		if _, err := a.Step(at(0.5), Message{Type: MsgAnnounce, From: "b", Token: far}); err != nil {
			t.Fatal(err)
		}
		offer, _, _ := tickFor(a, 0.75, 5)
		return offer
	}
	if offer := run(0); offer == nil || offer.To != "crowd" {
		t.Fatalf("unmeasured: want a move to the crowd, got %+v", offer)
	}
	if offer := run(0.002); offer != nil {
		t.Fatalf("the crowd measured 2 ms from its holder: want no move, got %+v", offer)
	}
}

// The field takes a client's measured RTT to the token it is attached to
// in place of the predicted distance, with and without a capacity.
func TestField_Measured(t *testing.T) {
	x := func(ms float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{ms / 1000}} }
	for _, capacity := range []int{0, 10} {
		cfg := DefaultConfig()
		cfg.Capacity = capacity
		others := []vivaldi.Coord{x(100)}
		clients := []vivaldi.Coord{x(50), x(50)}
		f := newField(&cfg, others, clients)
		f.setWeights([]float64{1, 1})
		predicted := f.potential(x(0)) // each client: min(50 ms to x, 50 ms to the other)
		f = newField(&cfg, others, clients)
		f.setWeights([]float64{1, 1})
		f.setMeasured([]int{0, -1}, []float64{0.005, 0.005}) // client 0 measured 5 ms from its holder
		got := f.potential(x(0))
		if want := (0.005 + 0.05) / 2; math.Abs(got-want) > 1e-12 || math.Abs(predicted-0.05) > 1e-12 {
			t.Fatalf("capacity %d: potential %v (predicted %v), want %v", capacity, got, predicted, want)
		}
	}
}
