package exp

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// growth writes results.json's growth.steady: one entry per phase end, the
// prefix method in the simulator, S within 10% of f·n (or the rounding),
// every superpeer agreed; and the figure.
func TestGrowth_Steady(t *testing.T) {
	e, ok := Lookup("growth")
	if !ok {
		t.Fatal("growth not registered")
	}
	var out bytes.Buffer
	rd, err := e.Run(Options{Seed: 2, Out: t.TempDir(), ID: "a", Stdout: &out, tiny: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "growth.csv", "superpeers-vs-target.png"} {
		if _, err := os.Stat(filepath.Join(rd, f)); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(rd, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Results struct {
			Growth struct {
				Steady []growthSteady `json:"steady"`
			} `json:"growth"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	st := res.Results.Growth.Steady
	if len(st) != 3 {
		t.Fatalf("%d steady entries, want one per phase (3)", len(st))
	}
	for _, s := range st {
		if s.Method != "prefix" || s.Where != "sim" || s.Fraction != 0.01 || !s.Agreed {
			t.Fatalf("entry %+v", s)
		}
		if d := math.Abs(float64(s.Superpeers) - s.Target); s.Superpeers < 1 || d > math.Max(0.6, 0.1*s.Target) {
			t.Fatalf("n %d: S %d for f·n %.1f", s.N, s.Superpeers, s.Target)
		}
	}
	if st[1].N != 1000 || st[1].Superpeers != 10 {
		t.Fatalf("at n = 1000: %+v", st[1])
	}
}
