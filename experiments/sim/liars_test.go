package sim

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// PickLiars marks round(f·n) peers, the same for a seed, and a smaller
// fraction's among a larger one's.
func TestPickLiars(t *testing.T) {
	count := func(b []bool) int {
		k := 0
		for _, x := range b {
			if x {
				k++
			}
		}
		return k
	}
	prev := PickLiars(490, 0, 1)
	for _, f := range []float64{0.05, 0.1, 0.2, 0.3} {
		cur := PickLiars(490, f, 1)
		if count(cur) != int(math.Round(f*490)) {
			t.Fatalf("f %g: %d liars", f, count(cur))
		}
		for i := range prev {
			if prev[i] && !cur[i] {
				t.Fatalf("f %g: peer %d lied at the smaller fraction only", f, i)
			}
		}
		prev = cur
	}
	if a, b := PickLiars(100, 0.2, 1), PickLiars(100, 0.2, 1); !equalBools(a, b) {
		t.Fatal("same seed, other liars")
	}
}

func equalBools(a, b []bool) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// Each kind's claim: an honest peer's is its own; inflation far from the
// truth, deflation at the origin, oscillation different each time,
// frog-boiling the truth until FrogStart and then FrogRate further each
// second; every claim a valid coordinate; with Delay a liar holds its
// answer back until the RTT fits its claim, by at most a second, never
// less than nothing.
func TestLiarClaims(t *testing.T) {
	liars := []bool{false, true, true}
	honest := vivaldi.Coord{Vec: []float64{0.01, 0.02, 0}, Height: 0.005, Error: 0.3}
	for _, k := range LiarKinds {
		l := NewLiar(k, liars, 3, 1)
		l.FrogStart = 10 * time.Second
		if c := l.Claim(time.Minute, 0, honest); c.DistanceTo(honest) != honest.DistanceTo(honest) || c.Error != honest.Error {
			t.Fatalf("%s: an honest peer claims %v", k, c)
		}
		a, b := l.Claim(time.Minute, 1, honest), l.Claim(time.Minute, 1, honest)
		for _, c := range []vivaldi.Coord{a, b} {
			if err := c.Check(); err != nil {
				t.Fatalf("%s: claim %v: %v", k, c, err)
			}
		}
		d := a.DistanceTo(honest) - honest.DistanceTo(honest)
		switch k {
		case Inflation:
			if math.Abs(d-(LieFar+LieHeight)) > 1e-9 || a.Error != LieError {
				t.Fatalf("inflation: %v s beyond the truth, error %v", d, a.Error)
			}
		case Deflation:
			if a.Vec[0] != 0 || a.Vec[1] != 0 || a.Height > 1e-5 || a.Error != LieError {
				t.Fatalf("deflation claims %v", a)
			}
		case Oscillation:
			if a.DistanceTo(b) == a.DistanceTo(a) {
				t.Fatal("oscillation claimed the same point twice")
			}
		case FrogBoiling:
			if c := l.Claim(5*time.Second, 1, honest); c.DistanceTo(honest) != honest.DistanceTo(honest) {
				t.Fatalf("frog-boiling moved before it started: %v", c)
			}
			if math.Abs(d-FrogRate*50) > 1e-9 || a.Error != FrogError {
				t.Fatalf("frog-boiling: %v s off after 50 s of drift, want %v", d, FrogRate*50)
			}
			if o := l.Claim(time.Minute, 2, honest); o.DistanceTo(a) > 1e-12+a.DistanceTo(a) {
				t.Fatal("frog-boiling liars drift apart")
			}
		}
		l.Delay = true
		caller := vivaldi.Coord{Vec: []float64{0, 0, 0}, Height: 0.001, Error: 0.2}
		rtt := 20 * time.Millisecond
		c, extra := l.Answer(time.Minute, 0, 1, honest, caller, rtt)
		want := time.Duration(caller.DistanceTo(c)*float64(time.Second)) - rtt
		if extra < 0 || extra > time.Second || (want > 0 && want <= time.Second && extra != want) || (want <= 0 && extra != 0) {
			t.Fatalf("%s: delay %v for a claim %v away at RTT %v", k, extra, caller.DistanceTo(c), rtt)
		}
	}
}

// 30% deflation liars at n = 120: without the defence the honest peers'
// error grows well past the clean run's, and the defence (with the opt-in
// outlier test) refuses liars' samples and keeps the error lower; every
// run is a function of its seed.
func TestSimulateLiars_Deflation(t *testing.T) {
	n := 120
	m, err := latency.Open(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	rtt, err := latency.Place(m.Filled(), n, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	off := vivaldi.DefaultConfig()
	off.OutlierFactor, off.OutlierMin, off.TriangleMargin, off.RemoteErrorMin = 0, 0, 0, 0
	on := vivaldi.DefaultConfig()
	on.OutlierFactor = 5 // opt-in: deflation passes the triangle test
	run := func(cfg vivaldi.Config, f float64) *LiarResult {
		r, err := SimulateLiars(LiarOptions{RTT: rtt, IDs: ids, Seed: 1, Kind: Deflation, Liars: PickLiars(n, f, 1), Vivaldi: &cfg, Rounds: 300})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	clean, liars, defended := run(off, 0), run(off, 0.3), run(on, 0.3)
	t.Logf("honest median error: clean %.4f, 30%% deflation %.4f, defended %.4f (liar samples refused %d of %d)",
		clean.HonestMedian, liars.HonestMedian, defended.HonestMedian, defended.LiarRefused, defended.LiarSamples)
	if liars.Liars != 36 || liars.LiarSamples == 0 || liars.LiarRefused != 0 {
		t.Fatalf("liars %d, samples %d refused %d", liars.Liars, liars.LiarSamples, liars.LiarRefused)
	}
	if liars.HonestMedian < 1.5*clean.HonestMedian {
		t.Errorf("30%% deflation: honest error %.4f, clean %.4f: want ≥ 1.5×", liars.HonestMedian, clean.HonestMedian)
	}
	if defended.HonestMedian >= liars.HonestMedian {
		t.Errorf("defended %.4f ≥ undefended %.4f", defended.HonestMedian, liars.HonestMedian)
	}
	if defended.LiarRefused == 0 || defended.RefusedReasons["implausible"] != defended.LiarRefused+defended.HonestRefused {
		t.Errorf("defended: %d liar samples refused, reasons %v", defended.LiarRefused, defended.RefusedReasons)
	}
	if again := run(on, 0.3); again.HonestMedian != defended.HonestMedian || again.LiarRefused != defended.LiarRefused {
		t.Error("the same seed gave another run")
	}
}
