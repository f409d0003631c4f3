package sim

import (
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// Over fixed holders with little room, clients that claim to have no
// other choice displace honest ones and come nearer their holders than
// the truth brings them; the holders' bound on regrets (RegretFactor)
// caps their claims, counts them, and leaves them less of a gain. A run
// is a function of its seed.
func TestSimulateAttach_RegretLiars(t *testing.T) {
	const n = 200
	rtt := planetlab(t, n, 3)
	vr, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: 3, Rounds: 100})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = string(rune('A'+i/26)) + string(rune('a'+i%26))
	}
	holders := []int{0, 20, 40, 60, 80, 100}
	liars := PickLiars(n, 0.1, 3)
	run := func(factor float64, l []bool) *AttachRunResult {
		ch := repel.DefaultAttachConfig()
		ch.ProbeEvery, ch.RegretFactor = 75*time.Second, factor
		r, err := SimulateAttach(AttachRunOptions{RTT: rtt, IDs: ids, Seed: 3, Coords: vr.Coords, Holders: holders,
			Capacity: 40, Displace: superpeer.DefaultDisplace, Choose: ch, RegretLiars: l})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mean := func(r *AttachRunResult, liar bool) float64 {
		s, k := 0.0, 0
		for c, d := range r.PerClient {
			if d >= 0 && liars[c] == liar {
				s, k = s+d, k+1
			}
		}
		return s / float64(k)
	}
	gain := func(factor float64) (float64, *AttachRunResult) {
		lied := run(factor, liars)
		return mean(lied, true) / mean(run(factor, nil), true), lied
	}
	off, offRun := gain(0)
	on, onRun := gain(1)
	t.Logf("liars' RTT × %.3f without the bound (%d honest displaced by liars), × %.3f with (%d; %d regrets capped)",
		off, offRun.Stats.DisplacedByLiars, on, onRun.Stats.DisplacedByLiars, onRun.Stats.Capped)
	if off > 0.9 || offRun.Stats.DisplacedByLiars == 0 || offRun.Stats.Capped != 0 {
		t.Errorf("without the bound: liars' RTT × %.3f, %d displaced by liars, %d capped", off, offRun.Stats.DisplacedByLiars, offRun.Stats.Capped)
	}
	if on <= off || onRun.Stats.Capped == 0 {
		t.Errorf("with the bound: liars' RTT × %.3f (× %.3f without), %d capped", on, off, onRun.Stats.Capped)
	}
	again, _ := gain(1)
	if again != on {
		t.Errorf("same seed, liars' RTT × %v then × %v", on, again)
	}
}
