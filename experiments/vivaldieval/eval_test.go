package vivaldieval

import (
	"math"
	"reflect"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func smallMatrix() latency.RTTs {
	return latency.NewSynthetic(60, 7, latency.SyntheticConfig{Clusters: 4})
}

func TestRun_Deterministic(t *testing.T) {
	for _, sched := range []string{ScheduleRandom, ScheduleNeighbors} {
		o := Options{Matrix: smallMatrix(), Name: "s", Rounds: 60, Schedule: sched, Seed: 3, Jitter: 0.1}
		a, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different results:\n%+v\n%+v", sched, a, b)
		}
		o.Seed = 4
		c, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(a.Checkpoints, c.Checkpoints) {
			t.Fatalf("%s: seeds 3 and 4 gave identical numbers: the seed is ignored", sched)
		}
	}
}

func TestRun_SameSamples(t *testing.T) {
	r, err := Run(Options{Matrix: smallMatrix(), Rounds: 40, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(60 * 40); r.Samples != want || r.SerfSamples != want {
		t.Fatalf("ours saw %d samples, serf %d, want %d each", r.Samples, r.SerfSamples, want)
	}
	if r.Refused != 0 {
		t.Fatalf("%d samples refused", r.Refused)
	}
	// Checkpoints 10, 32 and the last; both models scored at each.
	var rounds []int
	for _, c := range r.Checkpoints {
		rounds = append(rounds, c.Round)
		for _, v := range []float64{c.Median, c.P90, c.SerfMedian, c.SerfP90} {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("round %d: bad error value in %+v", c.Round, c)
			}
		}
	}
	if !reflect.DeepEqual(rounds, []int{10, 32, 40}) {
		t.Fatalf("checkpoints at %v, want [10 32 40]", rounds)
	}
}

func TestRun_Converges(t *testing.T) {
	// A plane with access delays embeds almost exactly: both models must
	// get there, and ours must beat serf.
	m := latency.NewSynthetic(100, 1, latency.SyntheticConfig{})
	r, err := Run(Options{Matrix: m, Rounds: 200, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	last := r.Checkpoints[len(r.Checkpoints)-1]
	t.Logf("%+v", last)
	if last.Median > 0.05 || last.SerfMedian > 0.1 {
		t.Fatalf("did not converge: %+v", last)
	}
	if last.Median > last.SerfMedian {
		t.Fatalf("ours %.3f worse than serf %.3f", last.Median, last.SerfMedian)
	}
}

func TestRun_SkipsMissing(t *testing.T) {
	// Host 0 has no measurement to anyone: it is never sampled nor scored,
	// and nobody samples it.
	base := latency.NewSynthetic(20, 1, latency.SyntheticConfig{})
	m := latency.NewMatrix("holes", 20, func(i, j int) float64 {
		if i == 0 || j == 0 {
			return latency.Missing
		}
		return base.RTT(i, j)
	})
	r, err := Run(Options{Matrix: m, Rounds: 50, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Samples != 19*50 || r.SerfSamples != 19*50 {
		t.Fatalf("samples %d/%d, want %d", r.Samples, r.SerfSamples, 19*50)
	}
	if last := r.Checkpoints[len(r.Checkpoints)-1]; math.IsNaN(last.Median) {
		t.Fatal("NaN error: a missing pair was scored")
	}
}

func TestRun_RefusesBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"no matrix":  {},
		"one host":   {Matrix: latency.NewMatrix("one", 1, nil)},
		"schedule":   {Matrix: smallMatrix(), Schedule: "ring"},
		"rounds":     {Matrix: smallMatrix(), Rounds: -1},
		"jitter":     {Matrix: smallMatrix(), Jitter: math.NaN()},
		"dimensions": {Matrix: smallMatrix(), Dims: 1000},
	} {
		if _, err := Run(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if q := Quantile(xs, 0.5); q != 5 {
		t.Fatalf("median = %v, want 5", q)
	}
	if q := Quantile(xs, 0.9); q != 9 {
		t.Fatalf("p90 = %v, want 9", q)
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Fatal("quantile of nothing is not NaN")
	}
}

func TestLiveError(t *testing.T) {
	m := latency.NewMatrix("line", 3, func(i, j int) float64 { return 10 * math.Abs(float64(i-j)) })
	coords := []vivaldi.Coord{
		{Vec: []float64{0}}, {Vec: []float64{0.010}}, {Vec: []float64{0.030}},
	}
	// Pairs: (0,1) exact, (0,2) 30 vs 20 ms: 0.5, (1,2) 20 vs 10 ms: 1.
	med, p90 := LiveError(coords, m)
	if math.Abs(med-0.5) > 1e-9 || math.Abs(p90-1) > 1e-9 {
		t.Fatalf("LiveError = %v, %v, want 0.5, 1", med, p90)
	}
}
