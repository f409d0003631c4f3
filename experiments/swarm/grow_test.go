package swarm

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

// TestGrow_PrefixCountFollowsTheSwarm: 12 prefix peers at f = 1/4 (S = 3)
// grown to 24 with the 12 held back, then shrunk to 12 again by killing
// peers at random: each phase comes to rest with S = f·n (3, 6, 3) and the
// selection converged; the count moved by at least the three unit steps
// each way, peers re-attached, the samples cover the run.
func TestGrow_PrefixCountFollowsTheSwarm(t *testing.T) {
	if testing.Short() {
		t.Skip("a live swarm through three phases of the census: a minute or two")
	}
	const f = 0.25
	s, _ := planetlabSwarmWith(t, 24, 3, func(c *Config) { c.Hold = 12 })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	p := MethodParams{Superpeers: 3, Fraction: f, TTL: 3 * time.Second}
	if err := s.StartPrefix(ctx, append(p.PrefixOptions(), superpeer.WithMinRecheck(200*time.Millisecond))...); err != nil {
		t.Fatal(err)
	}
	defer s.StopMethod()
	if err := s.WaitCensus(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	phases := []int{12, 24, 12}
	g, err := s.Grow(ctx, GrowOptions{Phases: phases, Fraction: f, Ramp: 4 * time.Second, Timeout: 3 * time.Minute, Every: time.Second,
		PhaseDone: func(ph GrowPhase) {
			t.Logf("phase %d: n %d, S %d (%d–%d) for f·n %.1f, converged %v at %.0f s of %.0f; %d joined, %d killed; %d re-attached over %d unit steps; without a superpeer: %d peers, at most %.1f s; first service after at most %.1f s; %.2f msgs/peer/s",
				ph.Phase, ph.Live, ph.S, ph.SMin, ph.SMax, ph.Target, ph.Converged, ph.RestSeconds, ph.Seconds, ph.Joined, ph.Killed,
				ph.Reattached, ph.UnitSteps, ph.Without, ph.MaxWithoutSeconds, ph.MaxFirstSeconds, ph.MsgsPerPeerSec)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Phases) != len(phases) {
		t.Fatalf("%d phases reported, want %d", len(g.Phases), len(phases))
	}
	for k, ph := range g.Phases {
		want := int(math.Round(f * float64(phases[k])))
		if !ph.Converged || ph.Live != phases[k] || ph.S != want || !ph.Agreed || !ph.AtRest {
			t.Errorf("phase %d: %+v; want %d live at rest on S = %d, converged", k, ph, phases[k], want)
		}
	}
	if ph := g.Phases[1]; ph.Joined != 12 || ph.JoinFailures != 0 || ph.UnitSteps < 3 || ph.Reattached == 0 || ph.MaxFirstSeconds <= 0 {
		t.Errorf("growing: %+v", ph)
	}
	if ph := g.Phases[2]; ph.Killed != 12 || ph.UnitSteps < 3 || ph.Reattached == 0 {
		t.Errorf("shrinking: %+v", ph)
	}
	if len(g.Samples) < 3 {
		t.Fatalf("%d samples", len(g.Samples))
	}
	for k, sm := range g.Samples {
		if k > 0 && (sm.Seconds <= g.Samples[k-1].Seconds || sm.Phase < g.Samples[k-1].Phase) {
			t.Fatalf("sample %d (%+v) after %+v", k, sm, g.Samples[k-1])
		}
		if sm.MsgsPerPeerSec <= 0 || sm.Live < 12 || sm.Live > 24 {
			t.Fatalf("sample %d: %+v", k, sm)
		}
	}
	t.Logf("%d samples over %.0f s; at most %.1f s without a superpeer for a peer served before", len(g.Samples), g.Samples[len(g.Samples)-1].Seconds, g.MaxWithoutSeconds)
}
