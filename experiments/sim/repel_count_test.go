package sim

import (
	"math"
	"testing"
	"time"
)

// With a fraction the simulated token count reaches f·n from either side
// and settles there: 200 PlanetLab peers at f = 0.03 agree on 6 tokens,
// started from 2 (new tokens minted) and from 12 (the holders of tokens
// 6–11 retire theirs), every client served.
func TestSimulateRepel_FractionFromBothSides(t *testing.T) {
	for _, start := range []int{2, 12} {
		r, _ := repelRunWith(t, 4, func(o *RepelOptions) {
			o.Config.Tokens = start
			o.Config.Fraction = 0.03
			o.Config.MaxTokens = 64
			o.Capacity = 2 * int(math.Ceil(1/o.Config.Fraction))
			o.Limit = 3 * time.Hour
		})
		t.Logf("from %d: count %d, %d holders, settled %v at %.0f s; events %v", start, r.Count, len(r.Superpeers), r.Settled, r.SettledSeconds, r.Events)
		if !r.Settled || r.Count != 6 || len(r.Superpeers) != 6 {
			t.Fatalf("from %d: settled %v, count %d, %d holders; want 6 settled", start, r.Settled, r.Count, len(r.Superpeers))
		}
		if r.Events["counted"] == 0 {
			t.Errorf("from %d: no count proposed", start)
		}
		if start > 6 && r.Events["retired"] < start-6 {
			t.Errorf("from %d: %d tokens retired, want at least %d", start, r.Events["retired"], start-6)
		}
		for c, sp := range r.Assignment {
			if sp < 0 {
				t.Fatalf("from %d: client %d unserved", start, c)
			}
		}
		if r.StepErrors != 0 {
			t.Errorf("from %d: %d messages refused", start, r.StepErrors)
		}
	}
}
