package exp

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
)

func TestRegistry(t *testing.T) {
	want := []string{"attacks", "churn", "elections", "growth", "prefix", "repel", "repel-cooling", "repel-coords", "requirements", "scale", "superpeer-count", "vivaldi"}
	if got := Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("names %v, want %v", got, want)
	}
	if _, ok := Lookup("nope"); ok {
		t.Fatal("Lookup found a made-up experiment")
	}
}

// superpeer-count on the simulator is a function of the seed: two runs
// write the same CSV, and results.json records the seed and the sweep.
func TestSuperpeerCount_SameSeedSameNumbers(t *testing.T) {
	e, _ := Lookup("superpeer-count")
	dir := t.TempDir()
	var out bytes.Buffer
	run := func(id string, seed int64) []byte {
		rd, err := e.Run(Options{Seed: seed, Out: dir, ID: id, Stdout: &out, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(rd, "counts.csv"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"results.json", "count-pow2.png", "count-exact.svg", "count-book-pow2.png"} {
			if _, err := os.Stat(filepath.Join(rd, f)); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	a, b, c := run("a", 7), run("b", 7), run("c", 8)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed, different counts")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds, same counts")
	}
	var res struct {
		Params struct {
			Seed int64 `json:"seed"`
			N    []int `json:"n"`
		} `json:"params"`
		Results struct {
			Rows []countRow `json:"rows"`
		} `json:"results"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "superpeer-count", "a", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Params.Seed != 7 || len(res.Params.N) != 3 || len(res.Results.Rows) != 12 {
		t.Fatalf("results.json: seed %d, n %v, %d rows", res.Params.Seed, res.Params.N, len(res.Results.Rows))
	}
	for _, r := range res.Results.Rows {
		// With n ≫ groups every group is occupied; and never more than n or
		// than the groups.
		if r.Measured > r.Groups || r.Measured > r.N || (r.N == 1000 && r.Groups == 8 && r.Measured != 8) {
			t.Fatalf("row %+v", r)
		}
	}
	if !strings.Contains(out.String(), "superpeer count") {
		t.Fatalf("no summary table on stdout:\n%s", out.String())
	}
}

// repel on the simulator is a function of the seed: two runs write the same
// table, and results.json records the seed, the sizes and every row.
func TestRepel_SameSeedSameNumbers(t *testing.T) {
	e, ok := Lookup("repel")
	if !ok {
		t.Fatal("repel not registered")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	run := func(id string, seed int64) []byte {
		rd, err := e.Run(Options{Seed: seed, Out: dir, ID: id, Stdout: &out, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(rd, "repel.csv"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"results.json", "client-rtt-n120-s4.png", "client-rtt-n120-s4.svg"} {
			if _, err := os.Stat(filepath.Join(rd, f)); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	a, b := run("a", 5), run("b", 5)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different tables:\n%s\n%s", a, b)
	}
	var res struct {
		Params struct {
			Seed int64 `json:"seed"`
			Ns   []int `json:"ns"`
			Ss   []int `json:"ss"`
		} `json:"params"`
		Results struct {
			Rows []struct {
				Method   string  `json:"method"`
				RTTMean  float64 `json:"rtt_mean"`
				Over     float64 `json:"over_capacity"`
				Unserved float64 `json:"unserved"`
				GoalMet  *bool   `json:"goal_met"`
				Repel    *struct {
					Settled bool `json:"settled"`
				} `json:"repel"`
			} `json:"rows"`
		} `json:"results"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "repel", "a", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Params.Seed != 5 || len(res.Params.Ns) != 1 || len(res.Results.Rows) != 5 {
		t.Fatalf("results.json: seed %d, ns %v, %d rows", res.Params.Seed, res.Params.Ns, len(res.Results.Rows))
	}
	for _, r := range res.Results.Rows {
		if r.Over != 0 || r.Unserved != 0 || !(r.RTTMean > 0) {
			t.Errorf("%s: %+v", r.Method, r)
		}
		if (r.GoalMet != nil) != (r.Method == mAttract) || (r.Repel != nil) != strings.HasPrefix(r.Method, "repel-") {
			t.Errorf("%s: goal %v, repel figures %v", r.Method, r.GoalMet, r.Repel)
		}
	}
	if !strings.Contains(out.String(), "seed 5") || !strings.Contains(out.String(), "goal met") {
		t.Fatalf("stdout lacks the seed or the table:\n%s", out.String())
	}
}

// The ratio and goal columns on a hand-made (n, S): k-median 10 ms, random
// 20 ms (the mean of its draws).
func TestRepel_GoalColumns(t *testing.T) {
	row := func(method string, mean, over, unserved float64) repelRow {
		return repelRow{Method: method, RTTMean: mean, OverCapacity: over, Unserved: unserved}
	}
	rnd := meanRow([]repelRow{row(mRandom, 18, 0, 0), row(mRandom, 22, 0, 0)})
	rows := []repelRow{
		row(mAttract, 11, 0, 0), // 1.1×, 0.55×: met
		row(mKMedian, 10, 0, 0),
		rnd,
		row(mRepulsion, 30, 0, 0),
	}
	if err := scoreRepelRows(rows); err != nil {
		t.Fatal(err)
	}
	check := func(r repelRow, rk, rr float64, goal *bool) {
		t.Helper()
		if math.Abs(r.RatioKMedian-rk) > 1e-12 || math.Abs(r.RatioRandom-rr) > 1e-12 {
			t.Errorf("%s: ratios %v %v, want %v %v", r.Method, r.RatioKMedian, r.RatioRandom, rk, rr)
		}
		if (goal == nil) != (r.GoalMet == nil) || (goal != nil && *goal != *r.GoalMet) {
			t.Errorf("%s: goal %v, want %v", r.Method, r.GoalMet, goal)
		}
	}
	yes, no := true, false
	check(rows[0], 1.1, 0.55, &yes)
	check(rows[1], 1, 0.5, nil)
	check(rows[2], 2, 1, nil)
	check(rows[3], 3, 1.5, nil)
	if rnd.Draws != 2 || rnd.RTTMean != 20 {
		t.Errorf("random mean row %+v", rnd)
	}
	for _, c := range []struct {
		r    repelRow
		rk   float64
		rr   float64
		want bool
	}{
		{row(mAttract, 11.6, 0, 0), 1.16, 0.58, false}, // over 1.15× k-median
		{row(mAttract, 12.4, 0, 0), 1.24, 0.62, false}, // both
		{row(mAttract, 11, 1, 0), 1.1, 0.55, false},    // a superpeer over C
		{row(mAttract, 11, 0, 3), 1.1, 0.55, false},    // clients unserved
	} {
		rs := append([]repelRow{c.r}, rows[1:]...)
		if err := scoreRepelRows(rs); err != nil {
			t.Fatal(err)
		}
		want := c.want
		check(rs[0], c.rk, c.rr, &want)
	}
	// A goal on the random ratio alone: k-median 10, random 16, attract 10
	// (1×, 0.625×) misses.
	rs := []repelRow{row(mAttract, 10, 0, 0), row(mKMedian, 10, 0, 0), row(mRandom, 16, 0, 0)}
	if err := scoreRepelRows(rs); err != nil {
		t.Fatal(err)
	}
	check(rs[0], 1, 0.625, &no)
	if err := scoreRepelRows(rs[:1]); err == nil {
		t.Error("scored without baselines")
	}
}

// tinyRowsTwice runs experiment name's tiny size twice on seed 2, fails
// unless both runs wrote the same table (csv), and returns the first
// run's results.rows.
func tinyRowsTwice[R any](t *testing.T, name, csv string) []R {
	t.Helper()
	e, ok := Lookup(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	dir := t.TempDir()
	run := func(id string) []byte {
		rd, err := e.Run(Options{Seed: 2, Out: dir, ID: id, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(rd, csv))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run("a"), run("b")
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different tables:\n%s\n%s", a, b)
	}
	var res struct {
		Results struct {
			Rows []R `json:"rows"`
		} `json:"results"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, name, "a", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res.Results.Rows
}

// repel-coords: the same seed gives the same table, and older coordinates
// (more Vivaldi rounds) have a lower error.
func TestRepelCoords_SameSeedSameNumbers(t *testing.T) {
	rows := tinyRowsTwice[coordsRow](t, "repel-coords", "coords.csv")
	if len(rows) != 2 || len(rows[0].Ratios) != 2 || rows[0].Rounds >= rows[1].Rounds {
		t.Fatalf("rows %+v", rows)
	}
	if !(rows[1].MedianError < rows[0].MedianError) {
		t.Errorf("error %.3f after %d rounds, %.3f after %d", rows[0].MedianError, rows[0].Rounds, rows[1].MedianError, rows[1].Rounds)
	}
	for _, r := range rows {
		if !(r.Mean > 0.5) || r.Worst < r.Mean {
			t.Errorf("row %+v", r)
		}
	}
}

// repel-cooling: the same seed gives the same table, every run of the grid
// is scored, and a lower settled gain moves the tokens more.
func TestRepelCooling_SameSeedSameNumbers(t *testing.T) {
	rows := tinyRowsTwice[coolingRow](t, "repel-cooling", "cooling.csv")
	if len(rows) != 2 || rows[0].SettledMinGain <= rows[1].SettledMinGain {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if len(r.Ratios) != 2 || len(r.Swap) != 2 || len(r.Moves) != 2 || !(r.Mean > 0.5) || r.Worst < r.Mean || r.Above < 0 || r.Above > 1 {
			t.Errorf("row %+v", r)
		}
		for _, s := range r.Swap {
			if s < 1 {
				t.Errorf("row %+v: an exchange that raises the cost", r)
			}
		}
	}
	if !(metrics.Mean(rows[1].Moves) > metrics.Mean(rows[0].Moves)) {
		t.Errorf("settled gain %.2f: %.1f moves; %.2f: %.1f", rows[0].SettledMinGain, metrics.Mean(rows[0].Moves), rows[1].SettledMinGain, metrics.Mean(rows[1].Moves))
	}
}

// TestRepel_ExploreFirstReachesTheClients: Options.ExploreFirst (`peer
// experiment repel --explore-first`) is recorded in the run's parameters
// and makes the simulated clients explore more than the default choice.
func TestRepel_ExploreFirstReachesTheClients(t *testing.T) {
	e, _ := Lookup("repel")
	dir := t.TempDir()
	type result struct {
		Params struct {
			Choose struct{ ExploreFirst int } `json:"choose"`
		} `json:"params"`
		Results struct {
			Rows []struct {
				Method string `json:"method"`
				Repel  *struct {
					Attach struct {
						Explored int `json:"explored"`
					} `json:"attach"`
				} `json:"repel"`
			} `json:"rows"`
		} `json:"results"`
	}
	run := func(id string, first int) (int, int) {
		rd, err := e.Run(Options{Seed: 3, Out: dir, ID: id, Stdout: io.Discard, ExploreFirst: first, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(rd, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res result
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Results.Rows {
			if r.Method == mAttract && r.Repel != nil {
				return res.Params.Choose.ExploreFirst, r.Repel.Attach.Explored
			}
		}
		t.Fatalf("%s: no %s row", id, mAttract)
		return 0, 0
	}
	first0, explored0 := run("default", 0)
	first4, explored4 := run("first4", 4)
	if first0 != 0 || first4 != 4 {
		t.Errorf("recorded ExploreFirst %d and %d, want 0 and 4", first0, first4)
	}
	if explored4 <= explored0 {
		t.Errorf("explorations: %d with ExploreFirst 4, %d without", explored4, explored0)
	}
	t.Logf("explorations: %d by default, %d with ExploreFirst 4", explored0, explored4)
}
