package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type params struct {
	Seed  int64   `json:"seed"`
	N     int     `json:"n"`
	Rate  float64 `json:"rate"`
	Notes string  `json:"notes,omitempty"`
	skip  int
}

type results struct {
	MeanRTT float64            `json:"mean_rtt"`
	P90     float64            `json:"p90"`
	Counts  []int              `json:"counts"`
	ByName  map[string]float64 `json:"by_name"`
	Inner   struct{ Gini float64 }
}

func newRun(t *testing.T) *Run {
	t.Helper()
	r, err := New(t.TempDir(), "exp", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNew_Names(t *testing.T) {
	root := t.TempDir()
	r, err := New(root, "selection", "")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(r.Dir); err != nil || !st.IsDir() {
		t.Fatalf("run dir %s not created: %v", r.Dir, err)
	}
	if filepath.Dir(r.Dir) != filepath.Join(root, "selection") || r.ID == "" {
		t.Errorf("Dir = %s, ID = %q", r.Dir, r.ID)
	}
	for _, bad := range [][2]string{{"", "x"}, {"a/b", "x"}, {"x", ".."}, {"x", `a\b`}} {
		if _, err := New(root, bad[0], bad[1]); err == nil {
			t.Errorf("New(%q, %q) accepted", bad[0], bad[1])
		}
	}
	if got := RunID(time.Date(2026, 11, 30, 1, 34, 15, 0, time.UTC), "seed42"); got != "20261130T013415Z-seed42" {
		t.Errorf("RunID = %q", got)
	}
}

func TestRun_WriteResults(t *testing.T) {
	r := newRun(t)
	res := results{MeanRTT: 12.5, P90: math.NaN(), Counts: []int{1, 2}, ByName: map[string]float64{"inf": math.Inf(1), "ok": 3}}
	res.Inner.Gini = 0.25
	if err := r.WriteResults(params{Seed: 42, N: 100, Rate: math.Inf(-1)}, res); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(r.Path("results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("results.json does not parse: %v\n%s", err, data)
	}
	p := doc["params"].(map[string]any)
	if p["seed"] != 42.0 || p["n"] != 100.0 || p["rate"] != nil {
		t.Errorf("params = %v", p)
	}
	if _, ok := p["notes"]; ok {
		t.Errorf("omitempty field written: %v", p)
	}
	rs := doc["results"].(map[string]any)
	if rs["mean_rtt"] != 12.5 || rs["p90"] != nil || rs["by_name"].(map[string]any)["inf"] != nil {
		t.Errorf("results = %v", rs)
	}
	if rs["Inner"].(map[string]any)["Gini"] != 0.25 {
		t.Errorf("nested struct = %v", rs["Inner"])
	}
	if doc["experiment"] != "exp" || doc["run_id"] != "run-1" || doc["go_version"] == "" {
		t.Errorf("header = %v", doc)
	}
	// Indented, and in struct order rather than alphabetical.
	s := string(data)
	if !strings.Contains(s, "\n  \"experiment\"") || strings.Index(s, `"seed"`) > strings.Index(s, `"rate"`) {
		t.Errorf("results.json not indented in field order:\n%s", s)
	}
}

func TestRun_WriteResults_NoSeed(t *testing.T) {
	r := newRun(t)
	if err := r.WriteResults(struct{ N int }{3}, nil); !errors.Is(err, ErrNoSeed) {
		t.Errorf("err = %v, want ErrNoSeed", err)
	}
	if err := r.WriteResults(map[string]any{"Seed": 1}, nil); err != nil {
		t.Errorf("map with Seed refused: %v", err)
	}
}

func TestRun_WriteCSV(t *testing.T) {
	r := newRun(t)
	rows := [][]string{Cells("random", 12.25, 3), Cells("greedy", math.NaN(), 4), Cells("has,comma", 1e-9, 5)}
	if err := r.WriteCSV("rtt", []string{"method", "mean", "S"}, rows); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(r.Path("rtt.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(rows) || recs[3][0] != "has,comma" || recs[1][1] != "12.25" || recs[2][1] != "NaN" || recs[3][1] != "1e-09" {
		t.Errorf("CSV = %v", recs)
	}
	if err := r.WriteCSV("bad", []string{"a", "b"}, [][]string{{"1"}}); err == nil {
		t.Error("short row accepted")
	}
	if !slices.Equal(r.Files(), []string{"rtt.csv"}) {
		t.Errorf("Files = %v", r.Files())
	}
}

func TestRun_WriteTable(t *testing.T) {
	r := newRun(t)
	tb := NewTable("method", "p50")
	tb.Add("greedy", 1.0/3)
	tb.Add("random")
	if err := r.WriteTable("summary", tb); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(r.Path("summary.csv"))
	if want := "method,p50\ngreedy,0.3333333333333333\nrandom,\n"; string(data) != want {
		t.Errorf("summary.csv = %q, want %q", data, want)
	}
}

func checkPlot(t *testing.T, r *Run, name string) {
	t.Helper()
	png, err := os.ReadFile(r.Path(name + ".png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Errorf("%s.png: %d bytes, not a PNG", name, len(png))
	}
	svg, err := os.ReadFile(r.Path(name + ".svg"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(svg))
	if !(strings.HasPrefix(s, "<?xml") || strings.HasPrefix(s, "<svg")) || !strings.Contains(s, "</svg>") {
		t.Errorf("%s.svg is not an SVG: %.80q", name, s)
	}
}

func TestRun_Plots(t *testing.T) {
	r := newRun(t)
	err := r.CDF("rtt_cdf", Figure{Title: "client RTT", X: "RTT (ms)"}, []Sample{
		{"greedy", []float64{10, 12, 15, 30, math.NaN()}},
		{"random", []float64{20, 25, 40, 90}},
		{"empty", nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkPlot(t, r, "rtt_cdf")

	err = r.Lines("count", Figure{X: "n", Y: "superpeers", LogX: true, LogY: true}, []Series{
		{Name: "measured", X: []float64{0, 10, 100, 1000}, Y: []float64{1, 9, 60, 250}, Points: true},
		{Name: "expected", X: []float64{10, 100, 1000}, Y: []float64{9.8, 84, 251}},
		{Name: "book", X: []float64{10, 100}, Y: []float64{math.Inf(1), 0}}, // nothing drawable
	})
	if err != nil {
		t.Fatal(err)
	}
	checkPlot(t, r, "count")
	if err := r.Lines("bad", Figure{}, []Series{{X: []float64{1}, Y: nil}}); err == nil {
		t.Error("series with unequal x and y accepted")
	}

	err = r.Scatter("space", Figure{Title: "coordinates"}, []Layer{
		{Name: "superpeers", X: []float64{1, 5}, Y: []float64{1, 5}, Highlight: true},
		{Name: "clients", X: []float64{0, 1, 2, 4, 6}, Y: []float64{0, 2, 1, 5, 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkPlot(t, r, "space")

	err = r.Stack("series", Figure{Title: "over time", X: "seconds"}, []Panel{
		{Y: "count", Series: []Series{{Name: "S", X: []float64{0, 2, 4}, Y: []float64{1, 1, 4}}, {Name: "f·n", X: []float64{0, 2, 4}, Y: []float64{1, 2, 4}}}},
		{Y: "messages", Legend: "top-left", Series: []Series{{Name: "msgs", X: []float64{1, 5}, Y: []float64{0.5, 2}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkPlot(t, r, "series")
	if err := r.Stack("none", Figure{}, nil); err == nil {
		t.Error("a stack without panels accepted")
	}
	want := []string{"rtt_cdf.png", "rtt_cdf.svg", "count.png", "count.svg", "space.png", "space.svg", "series.png", "series.svg"}
	if !slices.Equal(r.Files(), want) {
		t.Errorf("Files = %v, want %v", r.Files(), want)
	}
}

func TestTable_Aligned(t *testing.T) {
	tb := NewTable("method", "S", "p50 ms", "note")
	tb.Add("greedy", 32, 12.3456, "near-optimal")
	tb.Add("random", 32, 150.0, "")
	tb.Add("prefix", 1024, math.NaN(), "x")
	want := "" +
		"method     S  p50 ms  note\n" +
		"------  ----  ------  ------------\n" +
		"greedy    32   12.35  near-optimal\n" +
		"random    32   150.0  \n" +
		"prefix  1024     NaN  x\n"
	if got := tb.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormat(t *testing.T) {
	cases := map[any]string{
		12.3456: "12.35", 0.012345: "0.01235", 1234.5: "1234", 0.0: "0",
		1e-5: "1.000e-05", 2.5e7: "2.500e+07", math.Inf(1): "+Inf", 7: "7", "s": "s",
	}
	for v, want := range cases {
		if got := Format(v); got != want {
			t.Errorf("Format(%v) = %q, want %q", v, got, want)
		}
	}
}

// fakeClock advances by step on every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func TestProgress_NotATerminal(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0), step: time.Second}
	p := NewProgress(&buf, "build", 100, WithClock(clk.now))
	for i := 0; i < 100; i++ {
		p.Add(1)
	}
	p.Finish()
	p.Finish()
	out := buf.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// 100 seconds pass, one line at most every 10 s, plus the final line.
	if len(lines) < 5 || len(lines) > 11 {
		t.Errorf("%d lines, want about 10:\n%s", len(lines), out)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("carriage return in non-terminal output: %q", out)
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "build 100% 100/100") {
		t.Errorf("final line = %q", last)
	}
}

func TestProgress_Terminal(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0), step: 50 * time.Millisecond}
	p := NewProgress(&buf, "converge", 0, WithTerminal(true), WithClock(clk.now))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 50; i++ {
				p.Add(1)
			}
		})
	}
	wg.Wait()
	p.Finish()
	out := buf.String()
	if !strings.HasPrefix(out, "\rconverge ") || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
		t.Errorf("terminal output = %q", out)
	}
	if n := strings.Count(out, "\r"); n < 10 || n > 200 {
		t.Errorf("%d redraws for 200 updates over 10 s at most one per 100 ms", n)
	}
	if !strings.Contains(out[strings.LastIndex(out, "\r"):], "converge 200 ") {
		t.Errorf("final state missing: %q", out[strings.LastIndex(out, "\r"):])
	}
}
