package sim

import (
	"math"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
)

// The prefix method's census as the network grows from 100 to 20 000 peers
// and shrinks to 2 000: at the end of every phase every superpeer holds one
// value, S is within 10% of f·n (or the rounding), never 0, each unit step
// of S moved at most about one group's peers, and every value reached
// every peer within a minute of its proposal. The same seed gives the same
// run.
func TestPrefixGrowth(t *testing.T) {
	o := GrowthOptions{Seed: 3, Census: census.Config{Fraction: 0.01}}
	for _, n := range []int{100, 1000, 5000, 20000, 2000} {
		o.Phases = append(o.Phases, GrowthPhase{N: n, Ramp: time.Minute, Hold: 4 * time.Minute})
	}
	r, err := PrefixGrowth(o)
	if err != nil {
		t.Fatal(err)
	}
	if r.MinSuperpeers < 1 {
		t.Fatalf("S reached %d", r.MinSuperpeers)
	}
	for _, p := range r.Points {
		t.Logf("%+v", p)
		if !p.Agreed {
			t.Errorf("n %d: superpeers disagree at the end of the phase", p.N)
		}
		if d := math.Abs(float64(p.Superpeers) - p.Target); d > math.Max(0.6, 0.1*p.Target) {
			t.Errorf("n %d: S = %d, f·n = %.1f", p.N, p.Superpeers, p.Target)
		}
		if p.UnitSteps > 0 && p.PerUnitStep > 1.5*float64(p.N)/float64(p.Superpeers) {
			t.Errorf("n %d: %.0f peers re-selected per unit step of S, a group holds about %d", p.N, p.PerUnitStep, p.N/p.Superpeers)
		}
		if p.SpreadSeconds < 0 || p.SpreadSeconds > 60 {
			t.Errorf("n %d: a value took %.1f s to reach every peer", p.N, p.SpreadSeconds)
		}
	}
	again, err := PrefixGrowth(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Points {
		if r.Points[i] != again.Points[i] {
			t.Fatalf("phase %d differs between two runs of one seed: %+v vs %+v", i, r.Points[i], again.Points[i])
		}
	}
}
