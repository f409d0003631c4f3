package repel

import (
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func guardConfig() Config {
	c := testConfig(1, Attract)
	c.Guard = true
	return c
}

// forged is a version of token 0 that peer f announces as its own, with
// no hand-over from anyone: what any peer can sign.
func forged(f string, epoch uint64) Token {
	return Token{ID: 0, Epoch: epoch, Holder: f, HolderKey: PeerKey(f), Coord: vivaldi.Coord{Vec: []float64{0.05, 0.05}}, Seq: 1}
}

func announceTo(t *testing.T, n *Node, now time.Time, tok Token) Ready {
	t.Helper()
	r, err := n.Step(now, Message{Type: MsgAnnounce, From: tok.Holder, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNode_GuardKeepsTheHoldersToken: a forged fresher version fences the
// holder without the guard (the attack); with it the holder keeps its
// token, says it refused the rival (Rival) in an announcement at once,
// and still yields to its own hand-over.
func TestNode_GuardKeepsTheHoldersToken(t *testing.T) {
	for _, guard := range []bool{false, true} {
		cfg := guardConfig()
		cfg.Guard = guard
		a := mustNode(t, "a", cfg)
		holderOf(t, a, 0, 3)
		r := announceTo(t, a, at(1), forged("f", 99))
		_, holds := a.Held()
		if !guard {
			if holds || !hasEvent(r, EventFenced) {
				t.Fatalf("without the guard a forged epoch must fence the holder (the attack): %+v", r)
			}
			continue
		}
		if !holds || !hasEvent(r, EventUntraced) || hasEvent(r, EventFenced) {
			t.Fatalf("guarded holder lost its token to a forgery: %+v", r)
		}
		ann := msgs(r, MsgAnnounce)
		if len(ann) != 1 || ann[0].Token.Rival != 99 || ann[0].Token.Epoch != 3 {
			t.Fatalf("want one announcement of epoch 3 with Rival 99, got %+v", ann)
		}
		// A hand-over signed by someone else than the holder is refused too.
		fake := forged("f", 100)
		fake.Giver, fake.GiverEpoch = "g", 3
		if r = announceTo(t, a, at(2), fake); !hasEvent(r, EventUntraced) {
			t.Fatalf("a hand-over from a peer that never held the token taken: %+v", r)
		}
		// Its own hand-over, acked, moves the token away as ever.
		held, _ := a.Held()
		offer := Token{ID: 0, Epoch: 4, Holder: "b", HolderKey: PeerKey("b"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Giver: "a", GiverEpoch: held.Epoch}
		a.held.pending = &pendingMove{offer: offer, deadline: at(10)}
		r, err := a.Step(at(3), Message{Type: MsgMoveAck, From: "b", To: "a", Token: offer})
		if err != nil || !hasEvent(r, EventMovedAway) {
			t.Fatalf("own hand-over not let go: %v %+v", err, r)
		}
	}
}

// TestNode_GuardThirdPartyGoesBack: a peer that knows the holder takes a
// forged version provisionally, goes back to the holder when it announces
// that it refused it, then refuses forgeries for as long as it hears the
// holder, while still taking the holder's own hand-over at once. A
// holder silent for DeadAfter is replaced, as a mint would replace it.
func TestNode_GuardThirdPartyGoesBack(t *testing.T) {
	cfg := guardConfig()
	c := mustNode(t, "c", cfg)
	c.Tick(at(0))
	honest := Token{ID: 0, Epoch: 3, Holder: "h", HolderKey: PeerKey("h"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Seq: 5}
	announceTo(t, c, at(0), honest)
	known := func() Token { return c.tokens[0].tok }

	announceTo(t, c, at(1), forged("f", 50))
	if known().Holder != "f" {
		t.Fatalf("the forgery should be taken provisionally, known %+v", known())
	}
	// A late copy of the holder's earlier heartbeat is no reason to go back.
	announceTo(t, c, at(1.5), honest)
	if known().Holder != "f" {
		t.Fatal("went back on a stale copy")
	}
	// The holder's next announcement, having refused the rival, is.
	back := honest
	back.Seq, back.Rival = 6, 50
	if r := announceTo(t, c, at(2), back); !hasEvent(r, EventReverted) || known().Holder != "h" {
		t.Fatalf("did not go back to the live holder: %+v, known %+v", r, known())
	}
	// Contested: another forgery is refused while the holder is heard.
	if r := announceTo(t, c, at(3), forged("f", 60)); !hasEvent(r, EventUntraced) || known().Holder != "h" {
		t.Fatalf("forgery taken while the holder lives: %+v", r)
	}
	// The holder's own hand-over is taken at once.
	next := Token{ID: 0, Epoch: 4, Holder: "b", HolderKey: PeerKey("b"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Seq: 1, Giver: "h", GiverEpoch: 3}
	if announceTo(t, c, at(4), next); known().Holder != "b" {
		t.Fatalf("hand-over not taken: %+v", known())
	}
	// b falls silent for DeadAfter: then a fresher version is taken.
	later := at(4).Add(cfg.DeadAfter)
	c.Tick(later)
	announceTo(t, c, later, forged("m", 5))
	if known().Holder != "m" {
		t.Fatalf("a silent holder's token not replaced: %+v", known())
	}
}

// TestNode_GuardUnansweredOffer: a holder whose offer went unanswered
// takes its taker's own hand-over of the token (heard before the taker's
// announcement), and no other untraced version: a forgery with a higher
// epoch still cannot fence it.
func TestNode_GuardUnansweredOffer(t *testing.T) {
	cfg := guardConfig()
	for _, taker := range []string{"b", "f"} {
		a := mustNode(t, "a", cfg)
		holderOf(t, a, 0, 3)
		offer := Token{ID: 0, Epoch: 4, Holder: "b", HolderKey: PeerKey("b"), Giver: "a", GiverEpoch: 3}
		a.held.pending = &pendingMove{offer: offer, deadline: at(1)}
		a.held.lastOffered = 4
		if r := a.Tick(at(1)); !hasEvent(r, EventMoveTimedOut) {
			t.Fatalf("want a timeout, got %+v", r)
		}
		next := Token{ID: 0, Epoch: 9, Holder: "c", HolderKey: PeerKey("c"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Seq: 1, Giver: taker, GiverEpoch: 4}
		r := announceTo(t, a, at(2), next)
		_, holds := a.Held()
		if taker == "b" && (holds || !hasEvent(r, EventFenced)) {
			t.Fatalf("the taker's hand-over did not fence the unanswered giver: %+v", r)
		}
		if taker != "b" && holds != true {
			t.Fatal("a hand-over not signed by the taker fenced a holder with an unanswered offer")
		}
	}
}

// TestNode_GuardMintYields: a mint is a guess that a token is lost: for
// DeadAfter any fresher version replaces it (the token, moved on where the
// minter did not hear), after that only a traced one.
func TestNode_GuardMintYields(t *testing.T) {
	cfg := guardConfig()
	cfg.JoinWait = cfg.DeadAfter
	for _, late := range []bool{false, true} {
		a := mustNode(t, "a", cfg)
		a.SetPeers([]Peer{{ID: "a", Key: PeerKey("a"), Coord: a.coord}})
		a.Tick(at(0))
		r := a.Tick(at(0).Add(cfg.DeadAfter))
		if !hasEvent(r, EventMinted) {
			t.Fatalf("no mint: %+v", r)
		}
		now := at(1).Add(cfg.DeadAfter)
		if late {
			now = now.Add(cfg.DeadAfter)
			a.Tick(now)
		}
		moved := Token{ID: 0, Epoch: 7, Holder: "z", HolderKey: PeerKey("z"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Seq: 1, Giver: "y", GiverEpoch: 6}
		announceTo(t, a, now, moved)
		if _, holds := a.Held(); holds != late {
			t.Fatalf("late=%v: holds=%v after a fresher untraced version", late, holds)
		}
	}
}

// TestCluster_Forger: once the swarm has settled, a peer outside it
// announces every token as its own at a higher epoch four times a second.
// Without the guard it fences every holder and every peer names it as the
// holder; with it no holder is fenced and, once the holders have said they
// refused it, no peer names it.
// The attack starts once the mints are older than DeadAfter, as a
// young mint gives way to any fresher version.
func TestCluster_Forger(t *testing.T) {
	for _, guard := range []bool{false, true} {
		for seed := uint64(1); seed <= 8; seed++ {
			cfg := testConfig(4, Model(seed%2))
			cfg.Guard = guard
			nw := newNetwork(t, cfg, 16, seed)
			nw.runUntil(t, 600, func() bool { return nw.exactlyS() && !nw.anyMoving() }, "settle")
			// Past the mints' DeadAfter, in which any fresher version
			// replaces a mint (TestNode_GuardMintYields).
			for range 2 * cfg.DeadAfter / (250 * time.Millisecond) {
				nw.round(250 * time.Millisecond)
			}
			fenced := nw.events[EventFenced]
			if !guard {
				// The attack takes tokens out of the swarm: no longer held by
				// any of its nodes, which network.check would stop at.
				nw.dead["forger"] = true
			}
			naming := func() int {
				k := 0
				for _, id := range nw.live() {
					for _, e := range nw.nodes[id].tokens {
						if e.tok.Holder == "forger" {
							k++
						}
					}
				}
				return k
			}
			during := 0
			for r := range 80 { // 20 s of forgeries
				for id := uint32(0); id < 4; id++ {
					f := forged("forger", uint64(1000+r))
					f.ID, f.Seq = id, uint64(r+1)
					nw.queue = append(nw.queue, Message{Type: MsgAnnounce, From: "forger", Token: f})
				}
				nw.round(250 * time.Millisecond)
				during += naming()
			}
			// The holders' next announcements, each saying it refused the
			// forgeries, bring every peer back.
			for range 2 * cfg.AnnounceInterval / (250 * time.Millisecond) {
				nw.round(250 * time.Millisecond)
			}
			named := naming()
			fenced = nw.events[EventFenced] - fenced
			t.Logf("guard=%v seed %d: %d holders fenced; views naming the forger: %.1f%% during the attack, %d of %d after; events %v",
				guard, seed, fenced, 100*float64(during)/(80*16*4), named, 16*4, nw.events)
			if !guard {
				if fenced == 0 || named < 16*4/2 {
					t.Fatalf("seed %d: the unguarded attack should work: %d fenced, %d views name the forger", seed, fenced, named)
				}
				continue
			}
			if fenced != 0 || named != 0 || !nw.exactlyS() {
				t.Fatalf("seed %d: guarded: %d holders fenced, %d of %d views name the forger, holders %v", seed, fenced, named, 16*4, nw.holders())
			}
			if nw.events[EventUntraced] == 0 || nw.events[EventReverted] == 0 {
				t.Fatalf("seed %d: no refusal or reversal counted: %v", seed, nw.events)
			}
		}
	}
}

// TestNode_GuardHandOverAfterAForgery: a peer that took a forgery
// provisionally still takes the real holder's hand-over to it, going back
// to that lineage.
func TestNode_GuardHandOverAfterAForgery(t *testing.T) {
	c := mustNode(t, "c", guardConfig())
	c.Tick(at(0))
	honest := Token{ID: 0, Epoch: 3, Holder: "h", HolderKey: PeerKey("h"), Coord: vivaldi.Coord{Vec: []float64{0, 0}}, Seq: 5}
	announceTo(t, c, at(0), honest)
	announceTo(t, c, at(1), forged("f", 50))
	offer := Token{ID: 0, Epoch: 4, Holder: "c", HolderKey: PeerKey("c"), Coord: honest.Coord, Giver: "h", GiverEpoch: 3}
	r, err := c.Step(at(2), Message{Type: MsgMove, From: "h", To: "c", Token: offer})
	if err != nil || len(msgs(r, MsgMoveAck)) != 1 || !hasEvent(r, EventReverted) {
		t.Fatalf("the holder's hand-over refused after a forgery: %v %+v", err, r)
	}
	if tok, ok := c.Held(); !ok || tok.Epoch != 4 {
		t.Fatalf("holds %+v %v", tok, ok)
	}
}
