package exp

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/elections"
)

// electionsResults reads the "elections" entries of a run's results.json
// as they are written, field by field.
func electionsResults(t *testing.T, dir string) (entries []map[string]any, traces []map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Params struct {
			Seed *int64 `json:"seed"`
		} `json:"params"`
		Results struct {
			Elections []map[string]any `json:"elections"`
			Traces    []map[string]any `json:"traces"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Params.Seed == nil {
		t.Fatal("results.json has no seed")
	}
	return res.Results.Elections, res.Results.Traces
}

// Every registered algorithm is run and has its entries in results.json,
// with every field; LCR elects one leader, the highest ID, in every run
// and stays within its bound.
func TestElections_EveryAlgorithmInResults(t *testing.T) {
	e, ok := Lookup("elections")
	if !ok {
		t.Fatal("elections not registered")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	rd, err := e.Run(Options{Seed: 3, Out: dir, ID: "a", Stdout: &out, tiny: true})
	if err != nil {
		// An algorithm still being written may fail its runs; the others'
		// results are written all the same, and checked below.
		t.Logf("run: %v", err)
	}
	entries, _ := electionsResults(t, rd)
	got := map[string][]map[string]any{}
	for _, en := range entries {
		for _, f := range []string{"algo", "variant", "n", "runs", "one_leader", "right_leader", "messages_mean", "messages_max", "bound", "messages_all_mean", "time_mean_ms"} {
			if _, ok := en[f]; !ok {
				t.Fatalf("entry %v lacks %q", en, f)
			}
		}
		k := en["algo"].(string)
		if v := en["variant"].(string); v != "" {
			k += "/" + v
		}
		got[k] = append(got[k], en)
	}
	for _, a := range elections.Algorithms() {
		if len(got[a.Key()]) == 0 {
			t.Errorf("%s: no entry", a.Key())
		}
	}
	for _, a := range elections.Lookup("lcr") {
		for _, en := range got[a.Key()] {
			n := en["n"].(float64)
			if en["runs"].(float64) != 2 || en["one_leader"].(float64) != 1 || en["right_leader"].(float64) != 1 || en["error"] != nil {
				t.Errorf("%s: %v", a.Key(), en)
			}
			if b, ok := en["bound"].(float64); !ok || b != a.Bound(int(n)) || en["messages_max"].(float64) > b {
				t.Errorf("%s: messages %v, bound %v", a.Key(), en["messages_max"], en["bound"])
			}
		}
	}
	for _, f := range []string{"elections.csv", "elections-kinds.csv", "messages.png", "messages.svg", "time.png", "messages-lcr.png", "messages-lcr-worst.svg"} {
		if _, err := os.Stat(filepath.Join(rd, f)); err != nil {
			t.Error(err)
		}
	}
	if s := out.String(); !strings.Contains(s, "seed 3") || !strings.Contains(s, "right leader") {
		t.Fatalf("stdout lacks the seed or the table:\n%s", s)
	}
}

// The same seed gives the same table; --n narrows the sizes and --algo
// the algorithms; an unknown algorithm is an error.
func TestElections_SeedAlgoN(t *testing.T) {
	e, _ := Lookup("elections")
	dir := t.TempDir()
	run := func(id string, seed int64) []byte {
		rd, err := e.Run(Options{Seed: seed, Out: dir, ID: id, Algo: "lcr", N: 12, tiny: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(rd, "elections.csv"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := run("a", 5), run("b", 5), run("c", 6)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different tables:\n%s\n%s", a, b)
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds, same table")
	}
	entries, _ := electionsResults(t, filepath.Join(dir, "elections", "a"))
	if len(entries) != len(elections.Lookup("lcr")) {
		t.Fatalf("%d entries for lcr's %d variants", len(entries), len(elections.Lookup("lcr")))
	}
	for _, en := range entries {
		if en["algo"] != "lcr" || en["n"].(float64) != 12 {
			t.Fatalf("entry %v", en)
		}
	}
	if _, err := e.Run(Options{Seed: 1, Out: dir, ID: "d", Algo: "no-such-election", tiny: true}); err == nil || !strings.Contains(err.Error(), "no-such-election") {
		t.Fatalf("unknown algorithm: %v", err)
	}
}

// --trace writes FILE.txt and FILE.svg for one algorithm, one pair per
// variant for a name with several, and refuses an n too large to draw.
func TestElections_Trace(t *testing.T) {
	e, _ := Lookup("elections")
	dir := t.TempDir()
	base := filepath.Join(dir, "traces", "lcr")
	var out bytes.Buffer
	rd, err := e.Run(Options{Seed: 2, Out: dir, ID: "t", Algo: "lcr/worst", N: 6, Trace: base + ".svg", Stdout: &out, tiny: true})
	if err != nil {
		t.Fatal(err)
	}
	txt, err := os.ReadFile(base + ".txt")
	if err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(base + ".svg")
	if err != nil {
		t.Fatal(err)
	}
	// Worst-case LCR at n = 6: 21 ELECTION and 6 ELECTED messages, each
	// sent and delivered.
	events := 0
	for _, l := range strings.Split(strings.TrimSpace(string(txt)), "\n") {
		if !strings.HasPrefix(l, "#") {
			events++
		}
	}
	if events != 2*27 || strings.Count(string(svg), `<g class="msg`) != 27 {
		t.Fatalf("%d events, %d arrows", events, strings.Count(string(svg), `<g class="msg`))
	}
	_, traces := electionsResults(t, rd)
	if len(traces) != 1 || traces[0]["events"].(float64) != 54 || !strings.Contains(out.String(), base+".svg") {
		t.Fatalf("traces %v, stdout:\n%s", traces, out.String())
	}

	if _, err := e.Run(Options{Seed: 2, Out: dir, ID: "u", Algo: "lcr", N: 5, Trace: base, tiny: true}); err != nil {
		t.Fatal(err)
	}
	for _, a := range elections.Lookup("lcr") {
		name := base
		if a.Variant != "" {
			name += "-" + a.Variant
		}
		if _, err := os.Stat(name + ".svg"); err != nil {
			t.Error(err)
		}
	}
	if _, err := e.Run(Options{Seed: 2, Out: dir, ID: "v", Algo: "lcr", N: traceMaxN + 1, Trace: base, tiny: true}); err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Fatalf("trace of n = %d: %v", traceMaxN+1, err)
	}
}
