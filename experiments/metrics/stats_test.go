package metrics

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestQuantile_SmallSample(t *testing.T) {
	xs := []float64{4, 1, 3, 2} // unsorted on purpose
	orig := slices.Clone(xs)
	// Expected values are NumPy's np.percentile (linear, type 7).
	cases := []struct{ q, want float64 }{
		{0, 1}, {0.25, 1.75}, {0.5, 2.5}, {0.9, 3.7}, {1, 4},
	}
	for _, c := range cases {
		if got := Quantile(xs, c.q); !near(got, c.want, 1e-12) {
			t.Errorf("Quantile(%v, %v) = %v, want %v", xs, c.q, got, c.want)
		}
	}
	if !slices.Equal(xs, orig) {
		t.Errorf("Quantile modified its input: %v", xs)
	}
	if got := Percentiles(xs, 0.5, 0.9); !near(got[0], 2.5, 1e-12) || !near(got[1], 3.7, 1e-12) {
		t.Errorf("Percentiles = %v, want [2.5 3.7]", got)
	}
	if got := Quantile([]float64{7}, 0.9); got != 7 {
		t.Errorf("Quantile of one value = %v, want 7", got)
	}
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if got := Quantile(xs, q); !math.IsNaN(got) {
			t.Errorf("Quantile(q=%v) = %v, want NaN", q, got)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile(empty) = %v, want NaN", got)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 3, 2, 4})
	if s.N != 5 || s.Mean != 3 || s.Min != 1 || s.Max != 5 || s.P50 != 3 || !near(s.P90, 4.6, 1e-12) {
		t.Errorf("Summarize = %+v", s)
	}
	if !near(s.StdDev, math.Sqrt(2), 1e-12) {
		t.Errorf("StdDev = %v, want √2", s.StdDev)
	}
	e := Summarize(nil)
	if e.N != 0 || !math.IsNaN(e.Mean) || !math.IsNaN(e.P90) {
		t.Errorf("Summarize(empty) = %+v, want N 0 and NaNs", e)
	}
}

func TestCDF_SmallSample(t *testing.T) {
	got := CDF([]float64{3, 1, 2, 2, math.NaN()})
	want := []CDFPoint{{1, 0.25}, {2, 0.75}, {3, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("CDF = %v, want %v", got, want)
	}
	if got := CDF(nil); len(got) != 0 {
		t.Errorf("CDF(empty) = %v", got)
	}
}

func TestGini_KnownCases(t *testing.T) {
	cases := []struct {
		name  string
		loads []float64
		want  float64
	}{
		{"equal", []float64{5, 5, 5, 5}, 0},
		{"one holds all of 4", []float64{0, 0, 10, 0}, 0.75},
		{"one holds all of 2", []float64{0, 3}, 0.5},
		{"1 2 3", []float64{3, 1, 2}, 8.0 / 36},
		{"all zero", []float64{0, 0}, 0},
		{"empty", nil, 0},
	}
	for _, c := range cases {
		if got := Gini(c.loads); !near(got, c.want, 1e-12) {
			t.Errorf("%s: Gini(%v) = %v, want %v", c.name, c.loads, got, c.want)
		}
	}
}

// TestGini_MatchesDefinition checks the O(n log n) form against the double
// sum it is derived from.
func TestGini_MatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 50; trial++ {
		n := 1 + rng.Intn(30)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(rng.Intn(20))
		}
		var sum, abs float64
		for _, x := range xs {
			sum += x
			for _, y := range xs {
				abs += math.Abs(x - y)
			}
		}
		want := 0.0
		if sum > 0 {
			want = abs / (2 * float64(n) * sum)
		}
		if got := Gini(xs); !near(got, want, 1e-12) {
			t.Fatalf("Gini(%v) = %v, double sum gives %v", xs, got, want)
		}
	}
}

func TestMaxOverMean(t *testing.T) {
	if got := MaxOverMean([]float64{1, 2, 3}); got != 1.5 {
		t.Errorf("MaxOverMean = %v, want 1.5", got)
	}
	if got := MaxOverMean([]float64{0, 0}); !math.IsNaN(got) {
		t.Errorf("MaxOverMean(zeros) = %v, want NaN", got)
	}
	if got := CV([]float64{2, 2}); got != 0 {
		t.Errorf("CV(equal) = %v, want 0", got)
	}
}
