package repel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func mustNode(t *testing.T, id string, cfg Config) *Node {
	t.Helper()
	n, err := NewNode(id, PeerKey(id), cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	n.SetCoord(vivaldi.Coord{Vec: []float64{0.01, 0.02}, Height: 0.001})
	return n
}

func at(s float64) time.Time { return epoch0.Add(time.Duration(s * float64(time.Second))) }

func msgs(r Ready, typ MsgType) []Message {
	var out []Message
	for _, m := range r.Messages {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

func hasEvent(r Ready, k EventKind) bool {
	return slices.ContainsFunc(r.Events, func(e Event) bool { return e.Kind == k })
}

func TestToken_Beats(t *testing.T) {
	lo, hi := Key{1}, Key{2}
	a := Token{Epoch: 3, HolderKey: hi}
	b := Token{Epoch: 4, HolderKey: lo}
	c := Token{Epoch: 4, HolderKey: hi}
	if !b.Beats(a) || a.Beats(b) {
		t.Error("higher epoch must win")
	}
	if !c.Beats(b) || b.Beats(c) {
		t.Error("equal epochs: higher holder key must win")
	}
	if c.Beats(c) {
		t.Error("a version must not beat itself")
	}
}

func TestTokenKey_Stable(t *testing.T) {
	if TokenKey(0) == TokenKey(1) {
		t.Fatal("token names collide")
	}
	if TokenKey(7) != TokenKey(7) {
		t.Fatal("token name not deterministic")
	}
}

func TestConfig_Validate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	if err := LocalConfig().Validate(); err != nil {
		t.Fatalf("local: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"tokens":            func(c *Config) { c.Tokens = 0 },
		"model":             func(c *Config) { c.Model = 9 },
		"power":             func(c *Config) { c.RepelPower = 0.5 },
		"lambda":            func(c *Config) { c.Lambda = math.NaN() },
		"mingain":           func(c *Config) { c.MinGain = 0 },
		"settled":           func(c *Config) { c.SettledMinGain = c.MinGain / 2 },
		"dead":              func(c *Config) { c.DeadAfter = c.AnnounceInterval },
		"interval":          func(c *Config) { c.MoveInterval = 0 },
		"site":              func(c *Config) { c.SiteRTT = -time.Millisecond },
		"probettl":          func(c *Config) { c.ProbeTTL = 0 },
		"survey-probettl":   func(c *Config) { c.ProbeTTL, c.SiteRTT = 0, 0 },
		"survey-interval":   func(c *Config) { c.SurveyInterval = -time.Second },
		"survey-candidates": func(c *Config) { c.SurveyCandidates = 0 },
		"survey-clients":    func(c *Config) { c.SurveyClients = maxSurveyClients },
		"survey-gain":       func(c *Config) { c.SurveyGain = 0 },
		"survey-floor":      func(c *Config) { c.SurveyFloor = -time.Microsecond },
		"survey-timeout":    func(c *Config) { c.SurveyTimeout = 0 },
		"joinwait-short":    func(c *Config) { c.JoinWait = c.AnnounceInterval },
		"joinwait-long":     func(c *Config) { c.JoinWait = c.DeadAfter + time.Second },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
}

func TestNode_Step_RefusesNonsense(t *testing.T) {
	cfg := testConfig(2, Attract)
	n := mustNode(t, "a", cfg)
	good := vivaldi.Coord{Vec: []float64{0, 0}, Height: 0.001}
	for name, c := range map[string]struct {
		m    Message
		want error
	}{
		"range":     {Message{Type: MsgAnnounce, From: "b", Token: Token{ID: 2, Holder: "b", Coord: good}}, errTokenOutOfRange},
		"type":      {Message{Type: 99, From: "b", Token: Token{Holder: "b", Coord: good}}, errUnknownType},
		"author":    {Message{Type: MsgAnnounce, From: "c", Token: Token{Holder: "b", Coord: good}}, errNotHolder},
		"coord-nan": {Message{Type: MsgAnnounce, From: "b", Token: Token{Holder: "b", Coord: vivaldi.Coord{Vec: []float64{math.NaN(), 0}}}}, errInvalidCoord},
		"coord-nil": {Message{Type: MsgAnnounce, From: "b", Token: Token{Holder: "b"}}, errInvalidCoord},
		"not-me":    {Message{Type: MsgMove, From: "b", To: "c", Token: Token{Holder: "c"}}, errNotForMe},
		"offer":     {Message{Type: MsgMove, From: "b", To: "a", Token: Token{Holder: "a", HolderKey: Key{9}}}, errBadOffer},
		"ack":       {Message{Type: MsgMoveAck, From: "b", To: "a", Token: Token{Holder: "c", Coord: good}}, errNotHolder},
	} {
		r, err := n.Step(at(1), c.m)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
		if len(r.Messages) != 0 || len(r.Events) != 0 {
			t.Errorf("%s: refused message produced output %+v", name, r)
		}
	}
	if err := validateAnnounce(cfg, "b", Token{ID: 1, Holder: "b", Coord: good}); err != nil {
		t.Errorf("validateAnnounce refused a good announcement: %v", err)
	}
	if err := validateAnnounce(cfg, "c", Token{ID: 1, Holder: "b", Coord: good}); !errors.Is(err, errNotHolder) {
		t.Errorf("validateAnnounce: got %v, want ErrNotHolder", err)
	}
	if toks, known := n.Tokens(); known[0] || known[1] {
		t.Errorf("refused messages changed the table: %+v", toks)
	}
}

// A mint gate (the live selector's: a lookup of the name answered) holds
// a mint the node's rank allows until it opens, and the node mints then.
func TestNode_MintGateHoldsTheMint(t *testing.T) {
	cfg := testConfig(1, Attract)
	n := mustNode(t, "a", cfg)
	open := false
	var asked []uint32
	n.setMintGate(func(id uint32, rank int) bool {
		if rank != 0 {
			t.Errorf("a lone node ranks %d", rank)
		}
		asked = append(asked, id)
		return open
	})
	n.Tick(at(0))
	if r := n.Tick(at(10)); hasEvent(r, EventMinted) {
		t.Fatalf("minted with the gate shut: %+v", r)
	}
	if len(asked) == 0 || asked[0] != 0 {
		t.Fatalf("the gate was asked about %v, want token 0", asked)
	}
	open = true
	if r := n.Tick(at(11)); !hasEvent(r, EventMinted) {
		t.Fatalf("no mint once the gate opened: %+v", r)
	}
}

// TestNode_SettleAndFence walks one node through minting, settling and
// losing its token to a fresher version.
func TestNode_SettleAndFence(t *testing.T) {
	cfg := testConfig(1, Attract)
	n := mustNode(t, "a", cfg)
	if r := n.Tick(at(0)); len(r.Messages) != 0 || r.Role != superpeer.Client {
		t.Fatalf("fresh node acted: %+v", r)
	}
	if r := n.Tick(at(9)); len(r.Messages) != 0 {
		t.Fatalf("minted before DeadAfter: %+v", r)
	}
	r := n.Tick(at(10))
	if _, holding := n.Held(); !hasEvent(r, EventMinted) || r.Role != superpeer.Client || !holding || !r.RoleChanged || len(msgs(r, MsgAnnounce)) != 1 {
		t.Fatalf("want mint + announce at DeadAfter, got %+v", r)
	}
	tok, _ := n.Held()
	if tok.Epoch != 1 || tok.Holder != "a" {
		t.Fatalf("minted %+v", tok)
	}
	if lt := n.liveTokens(at(10)); len(lt) != 1 || lt[0].Holder != "a" {
		t.Fatalf("LiveTokens = %+v", lt)
	}
	r = n.Tick(at(14.9))
	if _, holding := n.Held(); r.Role != superpeer.Client || !holding {
		t.Fatalf("settled early: %v", r.Role)
	}
	r = n.Tick(at(15))
	if r.Role != superpeer.Superpeer || !r.RoleChanged || !hasEvent(r, EventSettled) {
		t.Fatalf("want superpeer after SettleAfter, got %+v", r)
	}
	// Settled: re-announces at AnnounceInterval, not MovingAnnounceInterval.
	if r = n.Tick(at(16.5)); len(msgs(r, MsgAnnounce)) != 0 {
		t.Fatalf("settled token announced too soon")
	}
	if r = n.Tick(at(18.1)); len(msgs(r, MsgAnnounce)) != 1 {
		t.Fatalf("settled token did not re-announce: %+v", r)
	}
	// An older version elsewhere is answered with ours at once.
	stale := Token{ID: 0, Epoch: 0, Holder: "z", HolderKey: PeerKey("z"), Coord: tok.Coord}
	r, err := n.Step(at(18.2), Message{Type: MsgAnnounce, From: "z", Token: stale})
	if err != nil || len(msgs(r, MsgAnnounce)) != 1 {
		t.Fatalf("stale holder not answered: %v %+v", err, r)
	}
	// A fresher version fences ours off.
	fresh := Token{ID: 0, Epoch: 2, Holder: "b", HolderKey: PeerKey("b"), Coord: tok.Coord}
	r, err = n.Step(at(19), Message{Type: MsgAnnounce, From: "b", Token: fresh})
	if err != nil || !hasEvent(r, EventFenced) || r.Role != superpeer.Client || !r.RoleChanged {
		t.Fatalf("want fenced to client, got %v %+v", err, r)
	}
	if _, ok := n.Held(); ok {
		t.Fatal("still holds after fencing")
	}
}

func holderOf(t *testing.T, n *Node, id uint32, epoch uint64) {
	t.Helper()
	n.Tick(at(0))
	tok := Token{ID: id, Epoch: epoch, Holder: n.ID(), HolderKey: PeerKey(n.ID())}
	if _, err := n.Step(at(0), Message{Type: MsgMove, From: "x", To: n.ID(), Token: tok}); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Held(); !ok {
		t.Fatal("offer not taken")
	}
}

func TestNode_RefusesSecondToken(t *testing.T) {
	n := mustNode(t, "a", testConfig(2, Attract))
	holderOf(t, n, 0, 5)
	offer := Token{ID: 1, Epoch: 3, Holder: "a", HolderKey: PeerKey("a")}
	r, err := n.Step(at(1), Message{Type: MsgMove, From: "b", To: "a", Token: offer})
	if err != nil {
		t.Fatal(err)
	}
	if ref := msgs(r, MsgMoveRefuse); len(ref) != 1 || ref[0].Reason != refuseHolding || ref[0].To != "b" {
		t.Fatalf("want refuse(holding), got %+v", r)
	}
	if tok, _ := n.Held(); tok.ID != 0 {
		t.Fatalf("holds %d, want 0", tok.ID)
	}
	// A duplicate of the offer it took is acked again, not refused.
	dup := Token{ID: 0, Epoch: 5, Holder: "a", HolderKey: PeerKey("a")}
	r, _ = n.Step(at(2), Message{Type: MsgMove, From: "x", To: "a", Token: dup})
	if len(msgs(r, MsgMoveAck)) != 1 {
		t.Fatalf("duplicate offer not re-acked: %+v", r)
	}
	// An offer older than what it knows is refused as stale.
	m := mustNode(t, "c", testConfig(2, Attract))
	m.Tick(at(0))
	ann := Token{ID: 1, Epoch: 7, Holder: "d", HolderKey: PeerKey("d"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}}
	if _, err := m.Step(at(0), Message{Type: MsgAnnounce, From: "d", Token: ann}); err != nil {
		t.Fatal(err)
	}
	old := Token{ID: 1, Epoch: 6, Holder: "c", HolderKey: PeerKey("c")}
	r, _ = m.Step(at(1), Message{Type: MsgMove, From: "e", To: "c", Token: old})
	if ref := msgs(r, MsgMoveRefuse); len(ref) != 1 || ref[0].Reason != refuseStale {
		t.Fatalf("want refuse(stale), got %+v", r)
	}
}

// TestNode_LostAck: the old holder keeps the token until the ack; when the
// ack is lost it times out still holding, and the new holder's announcement
// fences it off, leaving exactly one holder and no gap.
func TestNode_LostAck(t *testing.T) {
	cfg := testConfig(1, Repulsion)
	a, b := mustNode(t, "a", cfg), mustNode(t, "b", cfg)
	holderOf(t, a, 0, 1)
	held, _ := a.Held()
	// Drive a's decision by hand: an offer to b.
	offer := Token{ID: 0, Epoch: 2, Holder: "b", HolderKey: PeerKey("b")}
	a.held.pending = &pendingMove{offer: offer, deadline: at(1)}
	a.held.lastOffered = 2
	b.Tick(at(0))
	r, err := b.Step(at(0.5), Message{Type: MsgMove, From: "a", To: "b", Token: offer})
	if err != nil || len(msgs(r, MsgMoveAck)) != 1 || len(msgs(r, MsgAnnounce)) != 1 {
		t.Fatalf("b: %v %+v", err, r)
	}
	// The ack is lost. a times out and keeps its token.
	r = a.Tick(at(1))
	if !hasEvent(r, EventMoveTimedOut) {
		t.Fatalf("a: want timeout, got %+v", r)
	}
	if tok, ok := a.Held(); !ok || !tok.sameVersion(held) {
		t.Fatal("a lost its token on timeout")
	}
	// b's announcement arrives: fencing resolves to b.
	ann := msgs(b.Tick(at(2)), MsgAnnounce)
	if len(ann) != 1 {
		t.Fatal("b did not re-announce")
	}
	r, _ = a.Step(at(2), ann[0])
	if !hasEvent(r, EventFenced) {
		t.Fatalf("a: want fenced, got %+v", r)
	}
	if _, ok := a.Held(); ok {
		t.Fatal("a still holds")
	}
	if tok, ok := b.Held(); !ok || tok.Epoch != 2 {
		t.Fatal("b lost the token")
	}
}

// TestCluster_MintsAtClosest: on a fresh swarm with one view, token i is
// minted once, by the XOR-closest peer to its name that holds no token.
func TestCluster_MintsAtClosest(t *testing.T) {
	nw := newNetwork(t, testConfig(4, Attract), 12, 7)
	nw.round(0)
	var first = map[uint32]string{}
	for i := 0; i < 60 && len(first) < 4; i++ {
		nw.now = nw.now.Add(250 * time.Millisecond)
		for _, id := range nw.live() {
			r := nw.nodes[id].Tick(nw.now)
			for _, e := range r.Events {
				if e.Kind == EventMinted {
					if _, dup := first[e.Token.ID]; dup {
						t.Fatalf("token %d minted twice", e.Token.ID)
					}
					first[e.Token.ID] = id
				}
			}
			nw.absorb(id, r)
		}
		nw.quiesce()
	}
	if len(first) != 4 {
		t.Fatalf("minted %d tokens, want 4", len(first))
	}
	taken := map[string]bool{}
	for id := uint32(0); id < 4; id++ {
		best := ""
		for _, p := range nw.ids {
			if taken[p] {
				continue
			}
			if best == "" || TokenKey(id).Closer(PeerKey(p), PeerKey(best)) {
				best = p
			}
		}
		if first[id] != best {
			t.Errorf("token %d minted by %s, XOR-closest free peer is %s", id, first[id], best)
		}
		taken[first[id]] = true
	}
}

// TestCluster_FaultyNetwork is the property test: over many seeds, with
// messages dropped, duplicated and reordered, no token is ever lost (checked
// after every step by network.check) and a peer never holds two; once the
// faults stop, the swarm ends with exactly S tokens, one holder each, and
// every node agrees who holds them.
func TestCluster_FaultyNetwork(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) { faultyNetwork(t, guard) })
	}
}

func faultyNetwork(t *testing.T, guard bool) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	fenced, timeouts := 0, 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		model := Model(seed % 2)
		cfg := testConfig(4, model)
		cfg.Guard = guard
		nw := newNetwork(t, cfg, 16, seed)
		nw.drop, nw.dup, nw.reorder = 0.2, 0.1, true
		nw.attach = seed%4 == 1 // Attract with client digests
		for range 240 {         // 60 s of faults
			nw.round(250 * time.Millisecond)
		}
		nw.drop, nw.dup, nw.reorder = 0, 0, false
		ok := false
		for range 400 {
			nw.round(250 * time.Millisecond)
			if nw.exactlyS() && !nw.anyMoving() {
				ok = true
				break
			}
		}
		if !ok {
			t.Fatalf("seed %d (%v): no single holder per token after faults stopped: %v", seed, model, nw.holders())
		}
		// Past one announce round everyone agrees.
		for range 20 {
			nw.round(250 * time.Millisecond)
		}
		if err := nw.agree(); err != nil {
			t.Fatalf("seed %d (%v): %v", seed, model, err)
		}
		if nw.attach && nw.digests == 0 {
			t.Fatalf("seed %d: holders with attached clients sent no digest", seed)
		}
		fenced += nw.events[EventFenced]
		timeouts += nw.events[EventMoveTimedOut]
	}
	// The faults must have made duplicates for the test to mean anything.
	if fenced == 0 || timeouts == 0 {
		t.Errorf("faults never produced a duplicate: %d fencings, %d move timeouts", fenced, timeouts)
	}
	t.Logf("%d fencings, %d move timeouts resolved", fenced, timeouts)
}

// TestCluster_PartitionHeals: a swarm cut in two before any token exists
// mints every token on both sides (each side believes the other gone); on
// healing, fencing leaves exactly one holder per token.
func TestCluster_PartitionHeals(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		cfg := testConfig(4, Model(seed%2))
		nw := newNetwork(t, cfg, 16, seed)
		nw.partition()
		for range 120 {
			nw.round(250 * time.Millisecond)
		}
		dups := 0
		for _, hs := range nw.holders() {
			dups += len(hs) - 1
		}
		if dups == 0 {
			t.Fatalf("seed %d: partition made no duplicate tokens: %v", seed, nw.holders())
		}
		nw.heal()
		// Healed: one holder per token, no hand-over in flight, and every
		// peer's table names it. (Settled tokens may still move now and
		// then — a later move is not a failure to heal.)
		nw.run(t, 600, func() bool { return nw.exactlyS() && !nw.anyMoving() && nw.agree() == nil }, "heal", false)
		if err := nw.agree(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !nw.exactlyS() {
			t.Fatalf("seed %d: after healing %v", seed, nw.holders())
		}
	}
}

func (nw *network) anyMoving() bool {
	for _, id := range nw.live() {
		if nw.nodes[id].Moving() {
			return true
		}
	}
	return false
}

// agree checks that every live node's table names the actual holder of
// every token.
func (nw *network) agree() error {
	h := nw.holders()
	for _, id := range nw.live() {
		toks, known := nw.nodes[id].Tokens()
		for i := range toks {
			if !known[i] || len(h[uint32(i)]) != 1 || toks[i].Holder != h[uint32(i)][0] {
				return errorf("%s thinks token %d is at %q (known %v), holders %v", id, i, toks[i].Holder, known[i], h[uint32(i)])
			}
		}
	}
	return nil
}

// TestCluster_PotentialNeverRises: in a static space, with moves taken one at
// a time on a fresh view, the system potential never rises, every move
// lowers it, and the moves stop.
func TestCluster_PotentialNeverRises(t *testing.T) {
	for _, model := range []Model{Repulsion, Attract} {
		for seed := uint64(1); seed <= 8; seed++ {
			cfg := testConfig(5, model)
			nw := newNetwork(t, cfg, 40, seed)
			for range 200 {
				nw.round(250 * time.Millisecond)
				if nw.exactlyS() {
					break
				}
			}
			nw.quiesce()
			if !nw.exactlyS() {
				t.Fatalf("%v seed %d: tokens not minted", model, seed)
			}
			phi := systemPotential(cfg, nw.tokenCoords(), nw.allCoords())
			start, lastMove, moves := phi, nw.now, nw.moves
			for i := 0; nw.now.Sub(lastMove) < 10*cfg.MoveInterval; i++ {
				if i > 4000 {
					t.Fatalf("%v seed %d: moves do not stop (%d moves)", model, seed, nw.moves-moves)
				}
				nw.now = nw.now.Add(100 * time.Millisecond)
				for _, id := range nw.live() { // one node at a time, then deliver everything
					nw.absorb(id, nw.nodes[id].Tick(nw.now))
					before := nw.moves
					nw.quiesce()
					if !nw.exactlyS() {
						t.Fatalf("%v seed %d: %v", model, seed, nw.holders())
					}
					p := systemPotential(cfg, nw.tokenCoords(), nw.allCoords())
					if p > phi+1e-12*math.Abs(phi) {
						t.Fatalf("%v seed %d: potential rose %g → %g", model, seed, phi, p)
					}
					if nw.moves > before {
						if !(p < phi) {
							t.Fatalf("%v seed %d: a move did not lower the potential (%g → %g)", model, seed, phi, p)
						}
						lastMove = nw.now
					}
					phi = p
				}
			}
			n := nw.moves - moves
			if n > 200 {
				t.Errorf("%v seed %d: %d moves for 5 tokens", model, seed, n)
			}
			if nw.events[EventFenced] != 0 {
				t.Errorf("%v seed %d: %d fencings on a perfect network", model, seed, nw.events[EventFenced])
			}
			// Holders measured each other (SiteRTT), and in this space
			// (heights ≥ 1 ms) no two are within SiteRTT: no site move
			// broke the descent.
			if nw.probes == 0 || nw.events[EventSiteShared] != 0 {
				t.Errorf("%v seed %d: %d probes, %d site moves", model, seed, nw.probes, nw.events[EventSiteShared])
			}
			t.Logf("%v seed %d: %d moves, potential %.4g → %.4g", model, seed, n, start, phi)
		}
	}
}

// TestCluster_Recovery: after the swarm settles, holders vanish; the
// XOR-closest live free peers mint their tokens again with a higher epoch,
// no token is ever held twice (outside a move awaiting its ack), and the
// swarm ends with exactly S settled tokens.
func TestCluster_Recovery(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) { recovery(t, guard) })
	}
}

func recovery(t *testing.T, guard bool) {
	for seed := uint64(1); seed <= 10; seed++ {
		cfg := testConfig(4, Model(seed%2))
		cfg.Guard = guard
		nw := newNetwork(t, cfg, 20, seed)
		settled := func() bool {
			if !nw.exactlyS() {
				return false
			}
			for _, id := range nw.live() {
				if _, ok := nw.nodes[id].Held(); ok && nw.nodes[id].Role() != superpeer.Superpeer {
					return false
				}
			}
			return true
		}
		nw.runUntil(t, 600, settled, "settle")
		// Kill two holders.
		var victims []string
		old := map[uint32]uint64{}
		for id, hs := range nw.holders() {
			if len(victims) < 2 {
				victims = append(victims, hs[0])
				tok, _ := nw.nodes[hs[0]].Held()
				old[id] = tok.Epoch
			}
		}
		for _, v := range victims {
			nw.kill(v)
		}
		nw.tellPeers()
		nw.runUntil(t, 1200, settled, "recover")
		for id, e := range old {
			tok, _ := nw.nodes[nw.holders()[id][0]].Held()
			if tok.Epoch <= e {
				t.Errorf("seed %d: token %d back at epoch %d ≤ %d", seed, id, tok.Epoch, e)
			}
		}
		if nw.events[EventFenced] != 0 {
			t.Errorf("seed %d: %d fencings on a perfect network", seed, nw.events[EventFenced])
		}
	}
}

// runUntil runs perfect rounds until cond, checking that no token is held by
// two peers unless one of them is awaiting the ack of its move.
func (nw *network) runUntil(t *testing.T, rounds int, cond func() bool, what string) {
	t.Helper()
	nw.run(t, rounds, cond, what, true)
}

// run runs perfect rounds until cond; strict forbids duplicates as runUntil
// does.
func (nw *network) run(t *testing.T, rounds int, cond func() bool, what string, strict bool) {
	t.Helper()
	for range rounds {
		nw.round(250 * time.Millisecond)
		for id, hs := range nw.holders() {
			if !strict {
				break
			}
			still := 0
			for _, h := range hs {
				if !nw.nodes[h].Moving() {
					still++
				}
			}
			if still > 1 {
				t.Fatalf("t=%v: token %d held by %v", nw.now.Sub(epoch0), id, hs)
			}
		}
		if cond() {
			return
		}
	}
	var state []string
	for _, id := range nw.live() {
		if tok, ok := nw.nodes[id].Held(); ok {
			state = append(state, fmt.Sprintf("%s:%d@%d/%v/moving=%v", id, tok.ID, tok.Epoch, nw.nodes[id].Role(), nw.nodes[id].Moving()))
		}
	}
	t.Fatalf("%s: not reached in %d rounds; holders %v; events %v", what, rounds, state, nw.events)
}

func TestNode_Digest(t *testing.T) {
	cfg := testConfig(1, Attract)
	cfg.DigestSize = 4
	n := mustNode(t, "h", cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	var peers []Peer
	for i := range 30 {
		id := fmt.Sprintf("c%02d", i)
		peers = append(peers, Peer{ID: id, Key: PeerKey(id), Coord: randomCoords(rng, 1)[0], Attached: i < 20})
	}
	n.SetPeers(peers)
	holderOf(t, n, 0, 1)
	r := n.Tick(at(1.5)) // re-announces, with the digest
	ann := msgs(r, MsgAnnounce)
	if len(ann) != 1 {
		t.Fatalf("no announcement: %+v", r)
	}
	d := ann[0].Token.Digest
	if len(d) != 4 {
		t.Fatalf("digest of %d points, want 4", len(d))
	}
	var sum float64
	ids := map[string]bool{}
	for _, s := range d {
		if s.Weight < 1 || ids[s.ID] {
			t.Fatalf("bad digest point %+v", s)
		}
		ids[s.ID] = true
		sum += s.Weight
		if p := slices.IndexFunc(peers, func(p Peer) bool { return p.ID == s.ID }); p < 0 || !peers[p].Attached {
			t.Fatalf("digest point %s is not an attached client", s.ID)
		}
	}
	if sum != 20 {
		t.Fatalf("digest weighs %v clients, want the 20 attached", sum)
	}
	// A receiver refuses digests that are too long or weigh nothing.
	m := mustNode(t, "r", cfg)
	bad := ann[0]
	bad.Token.Digest = append(slices.Clone(d), Sample{ID: "x", Coord: d[0].Coord, Weight: 0})
	if _, err := m.Step(at(11), bad); !errors.Is(err, errInvalidDigest) {
		t.Fatalf("weight 0: got %v", err)
	}
	bad.Token.Digest = make([]Sample, maxDigest+1)
	for i := range bad.Token.Digest {
		bad.Token.Digest[i] = d[0]
	}
	if _, err := m.Step(at(11), bad); !errors.Is(err, errInvalidDigest) {
		t.Fatalf("too long: got %v", err)
	}
}

// TestNode_DigestAttracts: a crowd that another token serves from afar,
// known to this holder only through that token's digest, draws this token
// to it.
func TestNode_DigestAttracts(t *testing.T) {
	cfg := testConfig(2, Attract)
	a := mustNode(t, "a", cfg)
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.001} }
	a.SetCoord(c(0))
	a.SetPeers([]Peer{{ID: "n1", Key: PeerKey("n1"), Coord: c(0.002)}})
	holderOf(t, a, 0, 1)
	far := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0.2), Digest: []Sample{
		{ID: "crowd", Key: PeerKey("crowd"), Coord: c(0.1), Weight: 50},
		{ID: "b-near", Key: PeerKey("b-near"), Coord: c(0.2), Weight: 5},
	}}
	if _, err := a.Step(at(0.5), Message{Type: MsgAnnounce, From: "b", Token: far}); err != nil {
		t.Fatal(err)
	}
	var offer []Message
	for s := 1.0; s < 5 && len(offer) == 0; s += 0.25 {
		offer = msgs(a.Tick(at(s)), MsgMove)
	}
	if len(offer) != 1 || offer[0].To != "crowd" {
		t.Fatalf("want a move to the crowd, got %+v", offer)
	}
}

// TestNode_Cooling: a token that has moved many times recently will not
// move for a gain a fresh one would take; rest brings its count down.
func TestNode_Cooling(t *testing.T) {
	cfg := testConfig(2, Attract)
	cfg.CoolingRest = 10 * time.Second
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.001} }
	crowd := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0.2), Digest: []Sample{
		{ID: "crowd", Key: PeerKey("crowd"), Coord: c(0.1), Weight: 50},
	}}
	run := func(moves uint32) (moved bool, n *Node) {
		a := mustNode(t, "a", cfg)
		a.SetCoord(c(0))
		a.Tick(at(0))
		offer := Token{ID: 0, Epoch: 3, Holder: "a", HolderKey: PeerKey("a"), Moves: moves}
		if _, err := a.Step(at(0), Message{Type: MsgMove, From: "x", To: "a", Token: offer}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Step(at(0), Message{Type: MsgAnnounce, From: "b", Token: crowd}); err != nil {
			t.Fatal(err)
		}
		for s := 0.25; s < 4; s += 0.25 {
			if len(msgs(a.Tick(at(s)), MsgMove)) > 0 {
				return true, a
			}
		}
		return false, a
	}
	if moved, _ := run(0); !moved {
		t.Fatal("a fresh token did not move to the crowd")
	}
	moved, a := run(60)
	if moved {
		t.Fatal("a token with 60 recent moves still moved")
	}
	// Settled at 5 s; every 10 s of rest takes one move off.
	for s := 4.0; s <= 36; s += 0.5 {
		a.Tick(at(s))
		a.Step(at(s), Message{Type: MsgAnnounce, From: "b", Token: crowd})
	}
	if tok, _ := a.Held(); tok.Moves != 57 {
		t.Fatalf("after ~31 s of rest Moves = %d, want 57", tok.Moves)
	}
}

// Attract with a capacity: a client's cost without the token is its place in
// a capacitated assignment to the other tokens, and the token serves at
// most C clients, those that gain most by it.
func TestPotential_Capacity(t *testing.T) {
	at := func(ms float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{ms / 1000}} }
	cfg := DefaultConfig()
	others := []vivaldi.Coord{at(0)}
	crowd := []vivaldi.Coord{at(10), at(10), at(10), at(10)}
	pot := func(c int, x vivaldi.Coord, clients []vivaldi.Coord) float64 {
		cfg.Capacity = c
		return potential(cfg, x, others, clients)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	// Unbounded: a token on the crowd serves all four at 0 ms.
	if p := pot(0, at(10), crowd); !near(p, 0) {
		t.Fatalf("unbounded: %v", p)
	}
	// Capacity 2: the other token serves two of the crowd (10 ms), the
	// other two have no room there (unservedCost); on the crowd this token
	// takes those two, so the mean is (10 + 10 + 0 + 0) / 4 ms.
	if p := pot(2, at(10), crowd); !near(p, 0.005) {
		t.Fatalf("capacity 2: %v, want 0.005", p)
	}
	// A capacity that does not bind is the unbounded potential.
	for _, x := range []vivaldi.Coord{at(3), at(10), at(25)} {
		if a, b := pot(100, x, crowd), pot(0, x, crowd); !near(a, b) {
			t.Fatalf("at %v: capacity 100 gives %v, unbounded %v", x.Vec, a, b)
		}
	}
	// Two crowds of three, 5 ms each side of the other token, capacity 3:
	// the other token has room for the first crowd (equal regrets: the
	// lower indices), so this token is drawn to the second, which it serves
	// at 0 ms while the first is served at 5; on the first crowd it would
	// serve the second from 10 ms away.
	two := []vivaldi.Coord{at(-5), at(-5), at(-5), at(5), at(5), at(5)}
	if a, b := pot(3, at(5), two), pot(3, at(-5), two); !near(a, 0.0025) || !near(b, 0.0075) {
		t.Fatalf("two crowds: %v on the second, %v on the first; want 0.0025 and 0.0075", a, b)
	}
	cfg.Capacity = -1
	if cfg.Validate() == nil {
		t.Fatal("negative capacity accepted")
	}
}

// TestKmedianPicks_ManyClients: beyond maxMedianCandidates clients the
// picks come from a strided sample, and still land one in each of four
// tight clusters far apart, as the greedy k-median over all would.
func TestKmedianPicks_ManyClients(t *testing.T) {
	centres := [][2]float64{{0, 0}, {0.2, 0}, {0, 0.2}, {0.2, 0.2}}
	rng := rand.New(rand.NewPCG(3, 4))
	var cs []Peer
	for i := 0; i < 4*maxMedianCandidates; i++ {
		c := centres[i%4]
		cs = append(cs, Peer{ID: fmt.Sprint(i), Coord: vivaldi.Coord{
			Vec: []float64{c[0] + 0.002*rng.Float64(), c[1] + 0.002*rng.Float64()}, Height: 0.0001}})
	}
	picks := kmedianPicks(cs, 4)
	if len(picks) != 4 {
		t.Fatalf("%d picks, want 4", len(picks))
	}
	seen := map[int]bool{}
	for _, p := range picks {
		seen[p%4] = true
	}
	if len(seen) != 4 {
		t.Errorf("picks %v cover clusters %v, want all four", picks, seen)
	}
	if got := kmedianPicks(nil, 4); len(got) != 0 {
		t.Errorf("no clients: picks %v", got)
	}
}

// A holder counts its announcements (Seq, Issued); a node takes a copy of
// a version it knows as news that the holder lives only if its Seq is
// higher, so a copy relayed late does not keep a silent token alive.
func TestNode_HeartbeatSeq(t *testing.T) {
	cfg := testConfig(1, Attract)
	h := mustNode(t, "a", cfg)
	h.Tick(at(0))
	r := h.Tick(at(10)) // mints and announces
	first := msgs(r, MsgAnnounce)
	if len(first) != 1 || first[0].Token.Seq != 1 || !first[0].Token.Issued.Equal(at(10)) {
		t.Fatalf("mint announced %+v, want Seq 1 issued at 10 s", first)
	}
	r = h.Tick(at(11)) // MovingAnnounceInterval later
	second := msgs(r, MsgAnnounce)
	if len(second) != 1 || second[0].Token.Seq != 2 {
		t.Fatalf("re-announcement %+v, want Seq 2", second)
	}

	n := mustNode(t, "b", cfg)
	n.Tick(at(0))
	step := func(s float64, tok Token) {
		t.Helper()
		if _, err := n.Step(at(s), Message{Type: MsgAnnounce, From: "a", Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	step(11, second[0].Token)
	// Seq 1 arrives late, long after Seq 2: no news, the token still
	// counts as last heard at 11 s and dies DeadAfter after that.
	step(20, first[0].Token)
	if lt := n.liveTokens(at(20.9)); len(lt) != 1 || lt[0].Seq != 2 {
		t.Fatalf("LiveTokens at 20.9 s: %+v, want Seq 2", lt)
	}
	if lt := n.liveTokens(at(21)); len(lt) != 0 {
		t.Fatalf("a late relayed copy kept the token alive: %+v", lt)
	}
	// A higher Seq of the version is news.
	third := second[0].Token
	third.Seq = 3
	step(21, third)
	if lt := n.liveTokens(at(30)); len(lt) != 1 || lt[0].Seq != 3 {
		t.Fatalf("Seq 3 not taken as news: %+v", lt)
	}
}

// Dilated stretches every timer and no RTT.
func TestConfig_Dilated(t *testing.T) {
	c := DefaultConfig()
	c.JoinWait = 2 * c.AnnounceInterval
	d := c.Dilated(3)
	if d.DeadAfter != 3*c.DeadAfter || d.JoinWait != 3*c.JoinWait || d.MoveInterval != 3*c.MoveInterval || d.SurveyTimeout != 3*c.SurveyTimeout || d.CoolingRest != 3*c.CoolingRest {
		t.Fatalf("timers not stretched: %+v", d)
	}
	if d.SiteRTT != c.SiteRTT || d.SurveyFloor != c.SurveyFloor || d.MinDistance != c.MinDistance || d.Tokens != c.Tokens {
		t.Fatalf("RTTs or counts changed: %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A node that has never heard of a token mints it after JoinWait if it is
// the XOR-closest free peer to the token's name, the next closest
// DeadAfter later, and a token it has heard of waits the full DeadAfter.
func TestNode_JoinWait(t *testing.T) {
	cfg := testConfig(1, Attract)
	cfg.JoinWait = 2 * cfg.AnnounceInterval
	nw := newNetwork(t, cfg, 6, 3)
	ranked := append([]string(nil), nw.ids...)
	sort.Slice(ranked, func(i, j int) bool { return TokenKey(0).Closer(PeerKey(ranked[i]), PeerKey(ranked[j])) })
	// Nobody hears anyone: every node only ticks, so each mints on its own
	// timer.
	mintedAt := map[string]time.Duration{}
	for _, id := range nw.ids {
		nw.nodes[id].Tick(nw.now)
	}
	step := 100 * time.Millisecond
	for d := step; d <= cfg.JoinWait+2*cfg.DeadAfter; d += step {
		for _, id := range nw.ids {
			for _, e := range nw.nodes[id].Tick(nw.now.Add(d)).Events {
				if e.Kind == EventMinted {
					mintedAt[id] = d
				}
			}
		}
	}
	within := func(got, want time.Duration) bool { return got >= want && got < want+time.Second }
	if got := mintedAt[ranked[0]]; !within(got, cfg.JoinWait) {
		t.Errorf("closest peer minted at %v, want JoinWait %v", got, cfg.JoinWait)
	}
	if got := mintedAt[ranked[1]]; !within(got, cfg.JoinWait+cfg.DeadAfter) {
		t.Errorf("second closest minted at %v, want JoinWait+DeadAfter %v", got, cfg.JoinWait+cfg.DeadAfter)
	}
	if got, ok := mintedAt[ranked[3]]; ok {
		t.Errorf("fourth closest minted at %v, before its turn", got)
	}

	// Heard of: the token's holder falls silent; the closest free peer
	// waits DeadAfter from the last announcement, not JoinWait.
	nw = newNetwork(t, cfg, 6, 3)
	var holder string
	for i := 0; i < 200 && holder == ""; i++ {
		nw.round(step)
		for _, id := range nw.ids {
			if _, ok := nw.nodes[id].Held(); ok {
				holder = id
			}
		}
	}
	if holder == "" {
		t.Fatal("no token minted")
	}
	nw.kill(holder)
	nw.tellPeers()
	last := nw.now
	var again time.Duration
	for d := step; d <= 2*cfg.DeadAfter && again == 0; d += step {
		for _, id := range nw.live() {
			for _, e := range nw.nodes[id].Tick(last.Add(d)).Events {
				if e.Kind == EventMinted {
					again = d
				}
			}
		}
	}
	if again == 0 {
		t.Fatal("the dead holder's token was never minted again")
	}
	if again < cfg.DeadAfter-cfg.AnnounceInterval {
		t.Errorf("a heard-of token re-minted %v after its holder died, before DeadAfter %v", again, cfg.DeadAfter)
	}
}
