package repel

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// coordCheckHolder holds token 0 at x = 0 with ten clients beside it at
// 10 ms and five that claim to be 400 ms away in one crowd, and has
// measured all of them: the near ten at 10 ms, the crowd at 15 ms, where
// it really is. Token 1 is held by b, also at x = 0: by the coordinates
// one token serves the near clients, and the other would serve the crowd
// better from within it.
func coordCheckHolder(t *testing.T, cfg Config) *Node {
	t.Helper()
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.0001} }
	n := mustNode(t, "h", cfg)
	n.SetCoord(c(0))
	var peers []Peer
	for i := range 15 {
		id, x := fmt.Sprintf("near%d", i), 0.01+float64(i)*1e-4
		if i >= 10 {
			id, x = fmt.Sprintf("liar%d", i), 0.4+float64(i)*1e-4
		}
		peers = append(peers, Peer{ID: id, Key: PeerKey(id), Coord: c(x), Attached: true})
	}
	n.SetPeers(peers)
	holderOf(t, n, 0, 1)
	b := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0)}
	if _, err := n.Step(at(0), Message{Type: MsgAnnounce, From: "b", Token: b}); err != nil {
		t.Fatal(err)
	}
	n.Tick(at(0.1))
	for _, p := range peers {
		rtt := 10 * time.Millisecond
		if strings.HasPrefix(p.ID, "liar") {
			rtt = 15 * time.Millisecond
		}
		n.Measured(at(0.1), p.ID, rtt, true)
	}
	return n
}

// TestNode_CoordCheck: clients whose coordinates put them far beyond the
// RTT their holder measured are left out of where the token goes — no
// offer to them, no digest point — with one EventCoordMisfit each; with
// the check off the crowd draws the token to itself.
func TestNode_CoordCheck(t *testing.T) {
	cfg := testConfig(2, Attract)
	cfg.DigestSize = 4
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("check=%v", on), func(t *testing.T) {
			c := cfg
			if on {
				c.CoordCheck = 1
			}
			n := coordCheckHolder(t, c)
			misfits := map[string]int{}
			var offer *Message
			var digest []Sample
			for s := 0.25; s <= 8 && offer == nil; s += 0.25 {
				r := n.Tick(at(s))
				for _, e := range r.Events {
					if e.Kind == EventCoordMisfit {
						misfits[e.Token.Holder]++
					}
				}
				if m := msgs(r, MsgMove); len(m) > 0 {
					offer = &m[0]
				}
				if a := msgs(r, MsgAnnounce); len(a) > 0 && a[0].Token.Digest != nil {
					digest = a[0].Token.Digest
				}
			}
			liarPoints := 0
			for _, sm := range digest {
				if strings.HasPrefix(sm.ID, "liar") {
					liarPoints++
				}
			}
			if !on {
				if offer == nil || !strings.HasPrefix(offer.To, "liar") || len(misfits) != 0 {
					t.Fatalf("check off: want the crowd to draw the token, got offer %+v, misfits %v", offer, misfits)
				}
				return
			}
			if offer != nil && strings.HasPrefix(offer.To, "liar") {
				t.Fatalf("offered the token to %s, whose coordinate misfits its RTT", offer.To)
			}
			if digest == nil || liarPoints != 0 {
				t.Fatalf("digest %+v: want the near clients only", digest)
			}
			if len(misfits) != 5 {
				t.Fatalf("misfit events %v: want one for each of the 5 liars", misfits)
			}
			for id, k := range misfits {
				if k != 1 || !strings.HasPrefix(id, "liar") {
					t.Fatalf("misfit events %v: want one for each liar and none for a near client", misfits)
				}
			}
		})
	}
}

// TestNode_CoordCheck_Bounds: a coordinate fits up to (1+k)·RTT + floor
// from the holder, and any nearer; an unmeasured peer fits; and when most
// measured clients misfit, the holder's own coordinate is taken to be at
// fault and none is left out.
func TestNode_CoordCheck_Bounds(t *testing.T) {
	cfg := testConfig(1, Attract)
	cfg.CoordCheck, cfg.CoordFloor = 1, 10*time.Millisecond
	at1 := func(d ...float64) map[string]bool {
		n := mustNode(t, "h", cfg)
		n.SetCoord(vivaldi.Coord{Vec: []float64{0, 0}})
		var peers []Peer
		for i, x := range d {
			id := fmt.Sprintf("p%d", i)
			peers = append(peers, Peer{ID: id, Coord: vivaldi.Coord{Vec: []float64{x, 0}}, Attached: true})
			n.Measured(at(0), id, 100*time.Millisecond, true)
		}
		n.SetPeers(append(peers, Peer{ID: "unmeasured", Coord: vivaldi.Coord{Vec: []float64{5, 0}}, Attached: true}))
		m, _ := n.misfits(at(1))
		return m
	}
	for _, c := range []struct {
		d   float64 // predicted distance, seconds, at RTT 100 ms
		fit bool
	}{{0.1, true}, {0.209, true}, {0.211, false}, {0.039, true}, {0, true}} {
		if m := at1(c.d, 0.1, 0.1); m["p0"] == c.fit || m["unmeasured"] || len(m) > 1 {
			t.Errorf("distance %v s at RTT 100 ms: misfits %v, want p0 fitting %v", c.d, m, c.fit)
		}
	}
	if m := at1(0.5, 0.5, 0.1); len(m) != 0 {
		t.Errorf("two of three clients misfit: %v, want none left out", m)
	}
	bad := cfg
	for _, b := range []func(*Config){
		func(c *Config) { c.CoordCheck = -1 },
		func(c *Config) { c.CoordCheck = math.NaN() },
		func(c *Config) { c.CoordFloor = -time.Millisecond },
	} {
		b(&bad)
		if bad.Validate() == nil {
			t.Errorf("config %+v validated", bad)
		}
		bad = cfg
	}
}

// TestNode_CoordCheck_Candidate: with the check on, a holder measures the
// peer it is about to offer its token to. A crowd of peers that are not
// its clients claims to sit 400 ms away: measured at 15 ms, each it tries
// misfits (one EventCoordMisfit each, none offered the token); measured
// at the 400 ms they claim, the first gets the offer as soon as its RTT is
// in; unreachable (the measurement fails), each is asked once and passed
// over. With the check off the crowd gets the offer unmeasured.
func TestNode_CoordCheck_Candidate(t *testing.T) {
	c := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}, Height: 0.0001} }
	for _, tc := range []struct {
		name     string
		check    float64
		crowdRTT time.Duration
	}{{"liars", 1, 15 * time.Millisecond}, {"honest crowd", 1, 400 * time.Millisecond}, {"unreachable", 1, -1},
		{"check off", 0, 15 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(2, Attract)
			cfg.CoordCheck = tc.check
			n := mustNode(t, "h", cfg)
			n.SetCoord(c(0))
			var peers []Peer
			rtt := map[string]time.Duration{}
			for i := range 15 {
				id, x, r, attached := fmt.Sprintf("near%d", i), 0.01+float64(i)*1e-4, 10*time.Millisecond, true
				if i >= 10 {
					id, x, r, attached = fmt.Sprintf("crowd%d", i), 0.4+float64(i)*1e-4, tc.crowdRTT, false
				}
				peers = append(peers, Peer{ID: id, Key: PeerKey(id), Coord: c(x), Attached: attached})
				rtt[id] = r
			}
			n.SetPeers(peers)
			holderOf(t, n, 0, 1)
			b := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: c(0)}
			if _, err := n.Step(at(0), Message{Type: MsgAnnounce, From: "b", Token: b}); err != nil {
				t.Fatal(err)
			}
			misfits := map[string]int{}
			probed := map[string]int{}
			var offer *Message
			offerAt, lastProbe := 0.0, 0.0
			// Ticks every 0.25 s; each probe is answered 0.05 s later,
			// between ticks.
			var pending []string
			for s := 0.25; s <= 10 && offer == nil; s += 0.25 {
				for _, id := range pending {
					n.Measured(at(s-0.2), id, rtt[id], rtt[id] >= 0)
				}
				pending = nil
				r := n.Tick(at(s))
				for _, e := range r.Events {
					if e.Kind == EventCoordMisfit {
						misfits[e.Token.Holder]++
					}
				}
				for _, id := range r.Probes {
					probed[id]++
					pending = append(pending, id)
					if strings.HasPrefix(id, "crowd") {
						lastProbe = s
					}
				}
				if m := msgs(r, MsgMove); len(m) > 0 {
					offer, offerAt = &m[0], s
				}
			}
			crowdProbes := 0
			for id, k := range probed {
				if strings.HasPrefix(id, "crowd") {
					crowdProbes += k
				}
			}
			switch {
			case tc.check == 0:
				if offer == nil || !strings.HasPrefix(offer.To, "crowd") || crowdProbes != 0 || len(misfits) != 0 {
					t.Fatalf("check off: offer %+v, %d crowd probes, misfits %v; want the crowd offered the token unmeasured", offer, crowdProbes, misfits)
				}
			case tc.crowdRTT > 100*time.Millisecond:
				if offer == nil || !strings.HasPrefix(offer.To, "crowd") || probed[offer.To] != 1 || len(misfits) != 0 {
					t.Fatalf("honest crowd: offer %+v, probes %v, misfits %v; want the token offered to a measured crowd member", offer, probed, misfits)
				}
				if offerAt != lastProbe+0.25 {
					t.Fatalf("offer at %v s, its candidate asked for at %v s: want it at the first tick after the answer", offerAt, lastProbe)
				}
			case tc.crowdRTT < 0:
				if offer != nil && strings.HasPrefix(offer.To, "crowd") || len(misfits) != 0 {
					t.Fatalf("unreachable crowd: offer %+v, misfits %v; want no offer to it and no misfit", offer, misfits)
				}
				for i := 10; i < 15; i++ {
					if id := fmt.Sprintf("crowd%d", i); probed[id] != 1 {
						t.Fatalf("probes %v: want each unreachable crowd member asked for once", probed)
					}
				}
			default:
				if offer != nil && strings.HasPrefix(offer.To, "crowd") {
					t.Fatalf("offered the token to %s, whose coordinate misfits its RTT", offer.To)
				}
				if len(misfits) != 5 {
					t.Fatalf("misfit events %v, probes %v: want one for each of the 5 crowd members", misfits, probed)
				}
				for id, k := range misfits {
					if k != 1 || probed[id] != 1 {
						t.Fatalf("misfit events %v, probes %v: want each crowd member measured and counted once", misfits, probed)
					}
				}
			}
		})
	}
}
