package repel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// fractionConfig is testConfig with the count following fraction f of the
// network, from S tokens.
func fractionConfig(s int, f float64) Config {
	c := testConfig(s, Attract)
	c.Fraction = f
	return c
}

// timeUntil runs runUntil's rounds (250 ms, no duplicate holders) until
// cond, at most limit of virtual time, and says how long it took.
func (nw *network) timeUntil(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := nw.now
	nw.runUntil(t, int(limit/(250*time.Millisecond)), cond, what)
	return nw.now.Sub(start)
}

// The count follows the network: 60 peers at f = 0.1 started with S = 2
// agree on 6, each new token is minted once by one peer and the first two
// stay where they are; with 30 of them gone the count falls to 3 and the
// holders of tokens 3–5 retire theirs, the others keep theirs.
func TestFraction_GrowsAndShrinks(t *testing.T) {
	cfg := fractionConfig(2, 0.1)
	nw := newNetwork(t, cfg, 60, 11)
	nw.attach = true
	took := nw.timeUntil(t, 5*time.Minute, "grow to 6", func() bool { return nw.count() == 6 && nw.exactlyS() })
	t.Logf("S 2 → 6 in %v of virtual time; %d proposals", took, nw.events[EventCounted])
	if nw.events[EventCounted] < 1 {
		t.Fatal("no holder proposed a count")
	}
	for id := uint32(0); id < 6; id++ {
		if !nw.minted[id] {
			t.Errorf("token %d never minted", id)
		}
	}
	if nw.events[EventMinted] != 6 {
		t.Errorf("%d mints for 6 tokens in a network that loses nothing", nw.events[EventMinted])
	}
	if n := len(nw.retired); n != 0 {
		t.Errorf("tokens retired while growing: %v", nw.retired)
	}
	v := nw.nodes[nw.ids[0]].Count().Version
	for _, id := range nw.live() {
		if c := nw.nodes[id].Count(); c.Version != v {
			t.Fatalf("%s holds count %+v, %s %d", id, c, nw.ids[0], v)
		}
	}
	// Settle, then remove half the peers; the holders of tokens below 3
	// are kept, so those tokens need no re-mint.
	nw.timeUntil(t, 2*time.Minute, "settle", func() bool {
		for _, hs := range nw.holders() {
			if nw.nodes[hs[0]].Role() != superpeer.Superpeer {
				return false
			}
		}
		return true
	})
	keep := map[string]bool{}
	h := nw.holders()
	for id := uint32(0); id < 3; id++ {
		keep[h[id][0]] = true
	}
	killed := 0
	for _, id := range nw.ids {
		if killed < 30 && !keep[id] {
			if t, ok := nw.nodes[id].Held(); !ok || t.ID >= 3 {
				if ok {
					continue // retire those, not kill them
				}
				nw.kill(id)
				killed++
			}
		}
	}
	nw.tellPeers()
	minted := nw.events[EventMinted]
	took = nw.timeUntil(t, 10*time.Minute, "shrink to 3", func() bool { return nw.count() == 3 && nw.exactlyS() })
	t.Logf("S 6 → 3 in %v after %d of 60 peers left", took, killed)
	for id := uint32(3); id < 6; id++ {
		if nw.retired[id] != 1 {
			t.Errorf("token %d retired %d times, want once", id, nw.retired[id])
		}
	}
	if nw.events[EventMinted] != minted {
		t.Errorf("%d re-mints while shrinking: the kept tokens' holders lived", nw.events[EventMinted]-minted)
	}
}

func testCoord() vivaldi.Coord { return vivaldi.Coord{Vec: []float64{0.01, 0.02}, Height: 0.001} }

// A count that is not a fraction's: the table never changes, and counts on
// messages are ignored (but checked).
func TestFraction_FixedIgnoresCounts(t *testing.T) {
	cfg := testConfig(2, Attract)
	n, err := NewNode("a", PeerKey("a"), cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	tok := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: testCoord(), Seq: 1, Count: Count{S: 1, Version: 9, Peers: 3, Seq: 1, Estimate: 30}}
	if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if c := n.Count(); c != (Count{S: 2}) {
		t.Fatalf("count %+v, want the fixed 2", c)
	}
	tok.ID = 2
	if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); !errors.Is(err, errTokenOutOfRange) {
		t.Fatalf("token 2 of a fixed 2: err %v", err)
	}
}

// Bad counts are refused with a named error and change nothing; a fresher
// count lets a token of the new range in, in the same message.
func TestFraction_Input(t *testing.T) {
	cfg := fractionConfig(2, 0.1)
	cfg.MaxTokens = 16
	n, err := NewNode("a", PeerKey("a"), cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	base := Token{ID: 0, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: testCoord(), Seq: 1}
	for name, c := range map[string]Count{
		"S over MaxTokens": {S: 17, Version: 1},
		"negative S":       {S: -1, Version: 1},
		"version, no S":    {Version: 3},
		"NaN estimate":     {S: 3, Version: 1, Peers: 2, Estimate: math.NaN()},
		"huge report":      {S: 3, Version: 1, Peers: 1 << 30},
	} {
		tok := base
		tok.Count = c
		if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); !errors.Is(err, errInvalidCount) {
			t.Errorf("%s: err %v, want errInvalidCount", name, err)
		}
		if got := n.Count(); got != (Count{S: 2}) {
			t.Fatalf("%s changed the count to %+v", name, got)
		}
	}
	// Token 4 under a stale count is out of range; with a fresher count
	// of 5 on the same announcement it is in, and the count is taken.
	tok := base
	tok.ID = 4
	tok.Count = Count{S: 5, Version: 0}
	if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); err != nil {
		t.Fatalf("token 4 with count 5: %v", err)
	}
	if got := n.Count(); got != (Count{S: 5}) {
		t.Fatalf("count %+v, want 5", got)
	}
	if toks, known := n.Tokens(); len(toks) != 5 || !known[4] {
		t.Fatalf("table of %d, token 4 known %v", len(toks), known)
	}
	// A version without a count (sent before its holder's first
	// announcement) of a token past the table is let by, not refused.
	tok.ID = 6
	tok.Count = Count{}
	if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); err != nil {
		t.Fatalf("token 6 without a count under 5: %v", err)
	}
	if toks, known := n.Tokens(); len(toks) != 5 || n.Count().S != 5 || known[4] && toks[4].ID == 6 {
		t.Fatalf("token 6 without a count changed the table: %d tokens, count %+v", len(toks), n.Count())
	}
	tok.ID = 3
	tok.Count = Count{S: 3, Version: 0} // same version, smaller: not fresher
	if _, err := n.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: tok}); err != nil {
		t.Fatal(err)
	}
	if got := n.Count(); got.S != 5 {
		t.Fatalf("a stale count taken: %+v", got)
	}
	// A holder that reports more peers than the capacity lets it serve
	// is refused: it would inflate the count.
	capped := fractionConfig(2, 0.1)
	capped.Capacity = 20
	nc, err := NewNode("c", PeerKey("c"), capped, rand.New(rand.NewPCG(1, 3)))
	if err != nil {
		t.Fatal(err)
	}
	liar := base
	liar.Count = Count{S: 2, Peers: 22, Seq: 1}
	if _, err := nc.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: liar}); !errors.Is(err, errInvalidCount) {
		t.Errorf("a report of 22 peers under capacity 20: err %v", err)
	}
	liar.Count.Peers = 21
	if _, err := nc.Step(epoch0, Message{Type: MsgAnnounce, From: "b", Token: liar}); err != nil {
		t.Errorf("a report of 21 peers (20 clients and the holder): %v", err)
	}
	if err := (Config{Tokens: 2, Fraction: math.NaN()}).Validate(); err == nil {
		t.Error("NaN fraction accepted")
	}
	bad := fractionConfig(20, 0.1)
	bad.MaxTokens = 10
	if err := bad.Validate(); err == nil {
		t.Error("Tokens over MaxTokens accepted")
	}
}

// A holder whose own proposal retires its token announces the new count
// first, and a node that takes the count from that very announcement
// retires the token in it without a fault.
func TestFraction_ProposerRetiresItself(t *testing.T) {
	cfg := fractionConfig(6, 0.1)
	cfg.MaxTokens = 16
	a, err := NewNode("a", PeerKey("a"), cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	a.SetCoord(testCoord())
	now := epoch0
	offer := Token{ID: 5, Epoch: 2, Holder: "a", HolderKey: PeerKey("a"), Coord: testCoord(), Count: Count{S: 6}}
	if _, err := a.Step(now, Message{Type: MsgMove, From: "b", To: "a", Token: offer}); err != nil {
		t.Fatal(err)
	}
	var out Ready // the tick that changed the count
	for s := 1; s <= 120 && a.Count().S == 6; s++ {
		now = epoch0.Add(time.Duration(s) * time.Second)
		for id := range uint32(5) {
			h := fmt.Sprintf("h%d", id)
			tok := Token{ID: id, Epoch: 1, Holder: h, HolderKey: PeerKey(h), Coord: testCoord(), Seq: uint64(s),
				Count: Count{S: 6, Peers: 2, Seq: uint64(s)}}
			if _, err := a.Step(now, Message{Type: MsgAnnounce, From: h, Token: tok}); err != nil {
				t.Fatal(err)
			}
		}
		out = a.Tick(now)
	}
	if a.Count().S != 1 {
		t.Fatalf("count %+v after 2 min of 11 peers at f = 0.1, want 1", a.Count())
	}
	if _, ok := a.Held(); ok {
		t.Fatal("still holds token 5 under a count of 1")
	}
	var ann *Message
	for i, m := range out.Messages {
		if m.Type == MsgAnnounce && m.Token.Count.S == 1 {
			ann = &out.Messages[i]
		}
	}
	if ann == nil || ann.Token.ID != 5 {
		t.Fatalf("no announcement of the new count with the retired token: %+v", out.Messages)
	}
	z, err := NewNode("z", PeerKey("z"), cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Step(now, *ann); err != nil {
		t.Fatalf("the retiring announcement refused: %v", err)
	}
	if c := z.Count(); c.S != 1 || c.Version != 1 {
		t.Fatalf("z holds %+v, want S = 1 (v1)", c)
	}
	if toks, _ := z.Tokens(); len(toks) != 1 {
		t.Fatalf("z's table has %d tokens", len(toks))
	}
	// The same announcement again (relayed by gossip) is of a token the
	// count retired: ignored, not refused.
	if _, err := z.Step(now, *ann); err != nil {
		t.Fatalf("the retiring announcement, again: %v", err)
	}
}
