package exp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

// runTiny runs experiment name at its test size with seed, checks that it
// wrote files (besides results.json) and returns results.json. The tests
// that read one experiment's results at one seed share its run (attacks:
// floods and liars): one run per name and seed in the package's tests.
func runTiny(t *testing.T, name string, seed int64, files ...string) []byte {
	t.Helper()
	tinyRuns.Lock()
	defer tinyRuns.Unlock()
	key := fmt.Sprintf("%s/%d", name, seed)
	run, ok := tinyRuns.m[key]
	if !ok {
		e, found := Lookup(name)
		if !found {
			t.Fatalf("%s not registered", name)
		}
		var out bytes.Buffer
		rd, err := e.Run(Options{Seed: seed, Out: t.TempDir(), ID: "a", Stdout: &out, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(rd)
		if err != nil {
			t.Fatal(err)
		}
		run.files = map[string]bool{}
		for _, e := range entries {
			run.files[e.Name()] = true
		}
		if run.raw, err = os.ReadFile(filepath.Join(rd, "results.json")); err != nil {
			t.Fatal(err)
		}
		tinyRuns.m[key] = run
	}
	for _, f := range append(files, "results.json") {
		if !run.files[f] {
			t.Fatalf("%s: no %s among %v", key, f, run.files)
		}
	}
	return run.raw
}

// tinyRun is one of runTiny's runs: results.json and the names of the
// files the run wrote.
type tinyRun struct {
	raw   []byte
	files map[string]bool
}

// tinyRuns are runTiny's runs by experiment and seed.
var tinyRuns = struct {
	sync.Mutex
	m map[string]tinyRun
}{m: map[string]tinyRun{}}

// growth writes results.json's growth.steady: one entry per phase end, the
// prefix method in the simulator, S within 10% of f·n (or the rounding),
// every superpeer agreed; and the figure.
func TestGrowth_Steady(t *testing.T) {
	raw := runTiny(t, "growth", 2, "growth.csv", "superpeers-vs-target.png")
	var res struct {
		Results struct {
			Growth struct {
				Steady   []growthSteady `json:"steady"`
				Rescheme []reschemeRow  `json:"rescheme"`
			} `json:"growth"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	st := res.Results.Growth.Steady
	if len(st) != 5 {
		t.Fatalf("%d steady entries, want one per prefix phase (3) and per repel start (2)", len(st))
	}
	for k, s := range st {
		method := "prefix"
		if k >= 3 {
			method = "repel"
		}
		if s.Method != method || s.Where != "sim" || s.Fraction != 0.01 || !s.Agreed {
			t.Fatalf("entry %d: %+v", k, s)
		}
		if d := math.Abs(float64(s.Superpeers) - s.Target); s.Superpeers < 1 || d > math.Max(0.6, 0.1*s.Target) {
			t.Fatalf("%s n %d: S %d for f·n %.1f", s.Method, s.N, s.Superpeers, s.Target)
		}
	}
	if st[1].N != 1000 || st[1].Superpeers != 10 {
		t.Fatalf("at n = 1000: %+v", st[1])
	}
	rs := res.Results.Growth.Rescheme
	if len(rs) != 2 {
		t.Fatalf("%d re-scheme rows, want S → S+1 and back", len(rs))
	}
	for _, x := range rs {
		if x.Moved == 0 || x.Moved > x.Members || x.Attached > x.Members || x.To-x.From != 1 && x.From-x.To != 1 {
			t.Fatalf("re-scheme %+v: the peers that moved or attached anew must be some of the changed groups'", x)
		}
	}
}

// Narrowed to the token method's simulator rows, growth has no prefix
// phases and no live swarm to plot: it still writes its rows and the
// figure (a log axis over the token runs alone once made the plot panic).
func TestGrowth_RepelSimulatorOnly(t *testing.T) {
	e, _ := Lookup("growth")
	var out bytes.Buffer
	rd, err := e.Run(Options{Seed: 1, Out: t.TempDir(), ID: "a", Stdout: &out, Method: "repel", Where: "sim", tiny: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"growth-repel-sim.csv", "superpeers-vs-target.png", "results.json"} {
		if _, err := os.Stat(filepath.Join(rd, f)); err != nil {
			t.Fatal(err)
		}
	}
	var res struct {
		Results struct {
			Growth struct {
				Steady []growthSteady `json:"steady"`
			} `json:"growth"`
		} `json:"results"`
	}
	raw, err := os.ReadFile(filepath.Join(rd, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Results.Growth.Steady) == 0 {
		t.Fatal("no rows")
	}
	for _, row := range res.Results.Growth.Steady {
		if row.Method != "repel" || row.Where != "sim" {
			t.Errorf("row %+v: want only the token method's simulator rows", row)
		}
	}
}

// A dilation is the live token swarm's alone: asked of the prefix method's
// live swarm (whose timers do not follow it) or of the simulator, growth
// refuses before it runs anything.
func TestGrowth_DilateOnlyForTheLiveTokenSwarm(t *testing.T) {
	e, _ := Lookup("growth")
	for _, o := range []Options{
		{Dilate: 4},
		{Dilate: 4, Method: "prefix", Where: "live"},
		{Dilate: 4, Method: "repel", Where: "sim"},
	} {
		o.Seed, o.Out, o.ID, o.Stdout, o.Stderr, o.tiny = 1, t.TempDir(), "a", io.Discard, io.Discard, true
		if _, err := e.Run(o); err == nil || !strings.Contains(err.Error(), "live token swarm alone") {
			t.Errorf("method %q where %q dilated ×4: %v, want the refusal", o.Method, o.Where, err)
		}
	}
}

// A dilated live token swarm keeps the machine's stalls out of its Vivaldi
// samples as `peer swarm --dilate` does (swarm.StallFor), and says so in
// its parameters; undilated, the check is off.
func TestGrowth_DilatedLiveSwarmChecksStalls(t *testing.T) {
	e, _ := Lookup("growth")
	for _, c := range []struct {
		dilate float64
		want   float64
	}{{4, float64(swarm.DilatedStall) / float64(time.Millisecond)}, {0, 0}} {
		rd, err := e.Run(Options{Seed: 1, Out: t.TempDir(), ID: "a", Stdout: io.Discard, Stderr: io.Discard, Method: "repel", Where: "live", Dilate: c.dilate, tiny: true})
		if err != nil {
			t.Fatalf("dilated ×%g: %v", c.dilate, err)
		}
		raw, err := os.ReadFile(filepath.Join(rd, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Params growthParams `json:"params"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if res.Params.LiveStallMs != c.want {
			t.Errorf("dilated ×%g: live_stall_ms %g, want %g", c.dilate, res.Params.LiveStallMs, c.want)
		}
	}
}
