package exp

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	want := []string{"churn", "prefix", "requirements", "scale", "superpeer-count", "vivaldi"}
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
