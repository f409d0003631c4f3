package repel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// settledAt reports whether the live selectors agree on a count of S,
// its tokens 0..S-1 are held once each and settled, and every other peer
// is attached to one of their holders.
func settledAt(sels []*Selector, S int) error {
	holders := map[uint32][]peer.ID{}
	sps := map[peer.ID]bool{}
	for _, s := range sels {
		if c := s.Count(); c.S != S {
			return fmt.Errorf("%s holds count %+v", s.node.ID(), c)
		}
		if t, ok := s.Held(); ok {
			holders[t.ID] = append(holders[t.ID], s.node.ID())
			if s.Role() != superpeer.Superpeer {
				return fmt.Errorf("token %d not settled", t.ID)
			}
			sps[s.node.ID()] = true
		}
	}
	for id := uint32(0); id < uint32(S); id++ {
		if len(holders[id]) != 1 {
			return fmt.Errorf("token %d held by %v", id, holders[id])
		}
	}
	if len(holders) != S {
		return fmt.Errorf("tokens held: %v", holders)
	}
	for _, s := range sels {
		if !sps[s.node.ID()] && !sps[s.Superpeer()] {
			return fmt.Errorf("%s attached to %q, not a holder", s.node.ID(), s.Superpeer())
		}
	}
	return nil
}

// The count follows the network live, with either dissemination: 20 peers
// at f = 1/4 started with 2 tokens agree on 5 and settle; with half of them
// gone they agree on a count the census keeps for 10 (2 or 3: f·n is 2.5),
// the holders of the tokens past it retire theirs, and every client is
// served by the rest.
func TestSelector_FractionGrowsAndShrinks(t *testing.T) {
	for _, d := range []Dissemination{Piggyback, GossipSub} {
		t.Run(d.String(), func(t *testing.T) {
			if testing.Short() && d == GossipSub {
				t.Skip("-short: the default dissemination only")
			}
			cfg := LocalConfig()
			cfg.Tokens = 2
			cfg.Fraction = 0.25
			ps := selectorNetWith(t, 20, 20, cfg, d)
			start := time.Now()
			waitFor(t, 90*time.Second, "S = 5, settled and served", func() error { return settledAt(ps.sels, 5) })
			t.Logf("S 2 → 5 in %v", time.Since(start).Round(100*time.Millisecond))
			// Half go, but not the holders of tokens 3 and 4: with 10 peers
			// f·n is 2.5, and the census rests at 2 or 3 (within 0.6 of it),
			// so those holders must retire their tokens or keep them as the
			// count says.
			var live []*Selector
			held := map[*Selector]uint32{}
			killed := 0
			for i, s := range ps.sels {
				if t, ok := s.Held(); ok && t.ID >= 3 || killed == 10 {
					live = append(live, s)
					if ok {
						held[s] = t.ID
					}
					continue
				}
				s.Close()
				ps.vivs[i].Close()
				ps.nodes[i].Close()
				_ = ps.hosts[i].Close()
				killed++
			}
			rest, err := census.Config{Fraction: cfg.Fraction}.Filled()
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			final := 0
			waitFor(t, 90*time.Second, "a count at rest for the 10 left", func() error {
				S := live[0].Count().S
				if rest.Target(float64(len(live)), S) != S {
					return fmt.Errorf("count %d not at rest for %d peers", S, len(live))
				}
				final = S
				return settledAt(live, S)
			})
			retiring := 0
			for _, id := range held {
				if int(id) >= final {
					retiring++
				}
			}
			t.Logf("S 5 → %d in %v; %d holders retired", final, time.Since(start).Round(100*time.Millisecond), retiring)
			got := 0
			for _, s := range live {
				got += int(s.Stats()[EventRetired.String()])
				// A frame cut off because its peer was killed mid-write
				// (dropWrite, "the other side went away") is what killing
				// half the peers does, not a refusal between honest peers;
				// every other drop is one (a loaded CI run once wrote to a
				// peer as it was closed).
				d := s.Drops()
				delete(d, dropWrite)
				if len(d) > 0 {
					t.Errorf("%s dropped messages between honest peers: %v (stats %v)", s.node.ID(), d, stepErrors(s.Stats()))
				}
			}
			if final != 2 && final != 3 || retiring < 2 || got < retiring {
				t.Errorf("count %d; %d retirements counted, %d live holders of tokens at or past it", final, got, retiring)
			}
		})
	}
}

// stepErrors picks the model's refusals by reason out of a selector's stats.
func stepErrors(stats map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range stats {
		if strings.HasPrefix(k, "step_error_") {
			out[k] = v
		}
	}
	return out
}

// waitFor is waitUntil for a condition that says what is missing.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	defer func() {
		if t.Failed() {
			t.Logf("last: %v", last)
		}
	}()
	next := time.Now()
	waitUntil(t, limit, what, func() bool {
		last = cond()
		if testing.Verbose() && last != nil && time.Now().After(next) {
			t.Logf("%s: %v", what, last)
			next = time.Now().Add(3 * time.Second)
		}
		return last == nil
	})
}
