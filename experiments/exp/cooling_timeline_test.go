package exp

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
)

// TestCooling_Timeline (COOLING_TIMELINE=1, about 8 minutes) asks the
// simulator two questions about the live token selection's time to rest,
// on repel-cooling's runs with the swarm's configuration (settled gain
// 0.2, cooling every two moves, region surveys): at 2 000 peers, does a
// warm-up that stops at another Vivaldi error (the selection starting in
// the coordinates of 50–200 rounds, then gaining 0.82 rounds a second as
// the live swarm samples once its bound is passed) change the time to
// rest; and at 490 and 2 000, does news of the tokens that reaches half
// the peers up to 10 s late (the live swarm's piggyback: 0.05 s behind
// the holder at the median, 9 s at p90) slow it; and whether a settled
// holder's first survey 2.5 s after settling instead of the swarm's 5 s
// (`peer swarm --survey`) brings its time to converged — every place kept
// by its surveys, sim.RepelResult.SurveyedSeconds — forward. Every row
// must place S holders in every run.
func TestCooling_Timeline(t *testing.T) {
	if os.Getenv("COOLING_TIMELINE") == "" {
		t.Skip("COOLING_TIMELINE=1 runs it (about 8 minutes)")
	}
	const liveRate = 0.82 // rounds a second once the bound is passed: `peer swarm`'s report, 2 000 peers
	stages := func(start int, every float64, upTo float64) []coolingStage {
		var st []coolingStage
		for at := 0.0; at <= upTo; at += every {
			st = append(st, coolingStage{At: at, Rounds: start + int(math.Round(at*liveRate))})
		}
		return st
	}
	lag := sim.NewsLag{Share: 0.5, Max: 10 * time.Second}
	type row struct {
		n, start int
		lag      sim.NewsLag
		survey   time.Duration // 0: the swarm's
	}
	const half = 2500 * time.Millisecond
	rows := []row{{2000, 50, sim.NewsLag{}, 0}, {2000, 100, sim.NewsLag{}, 0}, {2000, 150, sim.NewsLag{}, 0}, {2000, 200, sim.NewsLag{}, 0},
		{2000, 100, lag, 0}, {2000, 100, sim.NewsLag{}, half}, {2000, 100, lag, half},
		{490, 50, sim.NewsLag{}, 0}, {490, 50, lag, 0}, {490, 50, sim.NewsLag{}, half}, {490, 50, lag, half}}
	tab := report.NewTable("n", "S", "start rounds", "start error", "news held back", "survey after s", "runs", "/kmed mean", "/kmed worst", "placement mean", "settled mean s", "surveyed mean s", "moves mean")
	errAt := map[[2]int]float64{}
	for _, r := range rows {
		S, places := 8, 5
		if r.n == 2000 {
			S, places = 16, 3
		}
		size := coolingSize{N: r.n, S: S, C: capacityFor(r.n, S), Places: places, Runs: 1,
			Stages: stages(r.start, 20, 120), Grid: []coolingKnobs{{0.2, 2, true}}, NewsLag: r.lag, SurveyInterval: r.survey}
		if _, ok := errAt[[2]int{r.n, r.start}]; !ok {
			rtt, _, err := space(latency.Default, r.n, 1)
			if err != nil {
				t.Fatal(err)
			}
			vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: 1, Rounds: r.start})
			if err != nil {
				t.Fatal(err)
			}
			errAt[[2]int{r.n, r.start}] = vr.Checkpoints[len(vr.Checkpoints)-1].Median
		}
		out, err := coolingRows(Options{Seed: 1}, coolingParams{Latency: latency.Default}, size, func() {})
		if err != nil {
			t.Fatal(err)
		}
		c := out[0]
		if len(c.Ratios) != places {
			t.Fatalf("n = %d from %d rounds: %d runs, want %d", r.n, r.start, len(c.Ratios), places)
		}
		held := "none"
		if r.lag.Share > 0 {
			held = "half, ≤ 10 s"
		}
		survey := r.survey
		if survey == 0 {
			survey = swarm.RepelSwarmConfig(S, repel.Attract).SurveyInterval
		}
		tab.Add(r.n, S, r.start, errAt[[2]int{r.n, r.start}], held, survey.Seconds(), len(c.Ratios), c.Mean, c.Worst, metrics.Mean(c.Placement), metrics.Mean(c.Settled), metrics.Mean(c.Surveyed), metrics.Mean(c.Moves))
	}
	if _, err := tab.WriteTo(os.Stdout); err != nil {
		t.Fatal(err)
	}
}
