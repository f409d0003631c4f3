package exp

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/superpeer-overlay/superpeer/experiments/elections"
	"github.com/superpeer-overlay/superpeer/experiments/report"
)

func init() {
	register(Experiment{
		Name:    "elections",
		Summary: "classic leader elections on the simulator: one leader, the right one, messages and time to agreement vs n beside the textbook bounds (--algo, --n, --trace FILE)",
		run:     runElections,
	})
}

// traceMaxN is the largest n --trace draws: a sequence chart of more
// lifelines is no longer read by anyone.
const traceMaxN = 64

type electionsParams struct {
	common
	// Algos are the algorithms run, by key (name or name/variant), and
	// Sizes the n each ran at.
	Algos []string         `json:"algos"`
	Sizes map[string][]int `json:"sizes"`
	Runs  int              `json:"runs"`
	Seeds string           `json:"seeds"`
	Algo  string           `json:"algo,omitempty"`
	N     int              `json:"n,omitempty"`
	Trace string           `json:"trace,omitempty"`
	Notes []string         `json:"notes"`
}

// electionRow is one (algorithm, variant, n): its runs summed up.
type electionRow struct {
	Algo    string `json:"algo"`
	Variant string `json:"variant"`
	N       int    `json:"n"`
	Runs    int    `json:"runs"`
	// OneLeader and RightLeader are the fractions of runs the algorithm's
	// Check passed: one leader named by every live node, and the one it
	// must elect.
	OneLeader   float64 `json:"one_leader"`
	RightLeader float64 `json:"right_leader"`
	// Messages are those the bound counts (BoundKinds; every message if
	// the algorithm names none); MessagesAll every message sent.
	MessagesMean    float64  `json:"messages_mean"`
	MessagesMax     int      `json:"messages_max"`
	Bound           *float64 `json:"bound"`
	MessagesMin     int      `json:"messages_min"`
	MessagesAllMean float64  `json:"messages_all_mean"`
	BoundKinds      []string `json:"bound_kinds"`
	// ByKind is the mean count per run of each message kind.
	ByKind map[string]float64 `json:"by_kind_mean"`
	// Agreed is the fraction of runs in which every live node named one
	// and the same leader at the end; TimeMeanMS and TimeMaxMS the
	// virtual time at which they came to (null if no run did), and
	// MessagesAgreedMean the messages sent by then.
	Agreed             float64 `json:"agreed"`
	TimeMeanMS         float64 `json:"time_mean_ms"`
	TimeMaxMS          float64 `json:"time_max_ms"`
	MessagesAgreedMean float64 `json:"messages_agreed_mean"`
	// Failures are the first few runs whose Check failed, with its note.
	Failures []string `json:"failures,omitempty"`
	// Error says why runs did not complete.
	Error string `json:"error,omitempty"`
}

// electionTrace is one traced run written by --trace.
type electionTrace struct {
	Algo        string   `json:"algo"`
	Variant     string   `json:"variant"`
	N           int      `json:"n"`
	Seed        int64    `json:"seed"`
	Events      int      `json:"events"`
	Messages    int      `json:"messages"`
	OneLeader   bool     `json:"one_leader"`
	RightLeader bool     `json:"right_leader"`
	Note        string   `json:"note,omitempty"`
	Files       []string `json:"files"`
}

// electionSeed is the seed of run k of a sweep with seed s: runs of one
// seed never meet those of another below 1000 runs.
func electionSeed(s int64, k int) int64 { return s*1000 + int64(k) }

// outcome is one run.
type outcome struct {
	counted, all, agreedMsgs int
	agreed                   time.Duration
	v                        elections.Verdict
	byKind                   map[string]int
	err                      error
}

func runElections(o Options, r *report.Run) error {
	algos := elections.Algorithms()
	if o.Algo != "" {
		algos = elections.Lookup(o.Algo)
		if len(algos) == 0 {
			var keys []string
			for _, a := range elections.Algorithms() {
				keys = append(keys, a.Key())
			}
			return fmt.Errorf("elections: no algorithm %q (%s)", o.Algo, strings.Join(keys, ", "))
		}
	}
	if len(algos) == 0 {
		return errors.New("elections: no algorithm registered")
	}
	if o.N < 0 {
		return fmt.Errorf("elections: n %d", o.N)
	}
	p := electionsParams{common: commonOf(o), Sizes: map[string][]int{}, Runs: 20, Algo: o.Algo, N: o.N, Trace: o.Trace}
	switch {
	case o.tiny:
		p.Runs = 2
	case o.Quick:
		p.Runs = 5
	}
	p.Seeds = fmt.Sprintf("run k of each (algorithm, n) has seed %d·1000 + k, k = 0..%d", o.Seed, p.Runs-1)
	p.Notes = []string{
		"each run: the algorithm's own scenario at n and the seed (topology, initiators, IDs, failure model), on a synthetic latency plane, one-way delay RTT/2",
		"one_leader, right_leader: fraction of runs whose end state passed the algorithm's Check (one leader named by every live node; the one it must elect)",
		"messages_mean, messages_max: the messages the bound counts (bound_kinds, every message if none); messages_all_mean: every message sent",
		"time_mean_ms: virtual time at which every live node first named the leader it names at the end, over the runs that agreed",
	}
	sizes := make([][]int, len(algos))
	total := 0
	for i, a := range algos {
		switch {
		case o.N > 0:
			sizes[i] = []int{o.N}
		case o.tiny:
			sizes[i] = []int{slices.Min(a.Sizes)}
		case o.Quick:
			sizes[i] = slices.Clone(a.Quick)
		default:
			sizes[i] = slices.Clone(a.Sizes)
		}
		sort.Ints(sizes[i])
		p.Algos = append(p.Algos, a.Key())
		p.Sizes[a.Key()] = sizes[i]
		total += len(sizes[i]) * p.Runs
		if o.Trace != "" && sizes[i][0] > traceMaxN {
			return fmt.Errorf("elections: --trace draws up to %d nodes; %s would trace n = %d (give --n)", traceMaxN, a.Key(), sizes[i][0])
		}
	}
	if o.Trace != "" {
		fmt.Fprintf(o.Stdout, "trace: run 0 (seed %d) of each algorithm at its smallest n\n", electionSeed(o.Seed, 0))
	}

	// Every run is independent: spread them over the CPUs, collect in order.
	out := make([][][]outcome, len(algos))
	type job struct{ a, s, k int }
	var jobs []job
	for i := range algos {
		out[i] = make([][]outcome, len(sizes[i]))
		for s := range sizes[i] {
			out[i][s] = make([]outcome, p.Runs)
			for k := 0; k < p.Runs; k++ {
				jobs = append(jobs, job{i, s, k})
			}
		}
	}
	// Largest n first, so the slowest runs do not come last on one CPU.
	sort.SliceStable(jobs, func(x, y int) bool { return sizes[jobs[x].a][jobs[x].s] > sizes[jobs[y].a][jobs[y].s] })
	bar := report.NewProgress(o.Stderr, "election runs", total)
	ch := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				out[j.a][j.s][j.k] = runOne(algos[j.a], sizes[j.a][j.s], electionSeed(o.Seed, j.k))
				bar.Add(1)
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-o.Ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	bar.Finish()
	if err := o.Ctx.Err(); err != nil {
		return err
	}

	var rows []electionRow
	var failed []string
	for i, a := range algos {
		for s, n := range sizes[i] {
			row := summarize(a, n, o.Seed, out[i][s])
			if row.Error != "" {
				failed = append(failed, fmt.Sprintf("%s n=%d: %s", a.Key(), n, row.Error))
			}
			rows = append(rows, row)
		}
	}

	var traces []electionTrace
	if o.Trace != "" {
		for i, a := range algos {
			tr, err := traceOne(o, a, sizes[i][0], len(algos) == 1, algos[0].Name == algos[len(algos)-1].Name)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s trace: %v", a.Key(), err))
				continue
			}
			traces = append(traces, tr)
		}
	}

	t := report.NewTable("algo", "variant", "n", "runs", "one leader", "right leader", "msgs mean", "msgs max", "bound", "max/bound", "all msgs", "agreed ms")
	kinds := report.NewTable("algo", "variant", "n", "kind", "mean per run")
	for _, row := range rows {
		bound, ratio := any(""), any("")
		if row.Bound != nil {
			bound = *row.Bound
			if *row.Bound > 0 {
				ratio = float64(row.MessagesMax) / *row.Bound
			}
		}
		agreed := any("")
		if !math.IsNaN(row.TimeMeanMS) {
			agreed = row.TimeMeanMS
		}
		t.Add(row.Algo, row.Variant, row.N, row.Runs, row.OneLeader, row.RightLeader, row.MessagesMean, row.MessagesMax, bound, ratio, row.MessagesAllMean, agreed)
		var ks []string
		for k := range row.ByKind {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			kinds.Add(row.Algo, row.Variant, row.N, k, row.ByKind[k])
		}
	}
	if err := printTable(o, r, "elections", fmt.Sprintf("elections: %d runs per (algorithm, n), fractions of runs with one leader and the right one, counted messages beside the bound", p.Runs), t); err != nil {
		return err
	}
	if err := r.WriteTable("elections-kinds", kinds); err != nil {
		return err
	}
	for _, row := range rows {
		for _, f := range row.Failures {
			fmt.Fprintf(o.Stdout, "check failed: %s n=%d %s\n", key(row.Algo, row.Variant), row.N, f)
		}
	}
	for _, tr := range traces {
		fmt.Fprintf(o.Stdout, "trace %s n=%d seed %d: %d events, %s\n", key(tr.Algo, tr.Variant), tr.N, tr.Seed, tr.Events, strings.Join(tr.Files, ", "))
	}
	if err := plotElections(r, algos, rows); err != nil {
		return err
	}
	res := map[string]any{"elections": rows}
	if traces != nil {
		res["traces"] = traces
	}
	if err := r.WriteResults(p, res); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("elections: %d of %d cells failed: %s", len(failed), len(rows)+len(traces), strings.Join(failed, "; "))
	}
	return nil
}

// runOne runs one seed; a panic of the algorithm is the run's error.
func runOne(a elections.Algorithm, n int, seed int64) (oc outcome) {
	defer func() {
		if p := recover(); p != nil {
			oc = outcome{err: fmt.Errorf("%s n=%d seed %d: panic: %v", a.Key(), n, seed, p)}
		}
	}()
	res, v, err := a.Run(n, seed, false)
	if err != nil {
		return outcome{err: err}
	}
	return outcome{counted: a.Counted(res), all: res.Messages, agreedMsgs: res.MessagesAgreed, agreed: res.Agreed, v: v, byKind: res.ByKind}
}

func summarize(a elections.Algorithm, n int, seed int64, runs []outcome) electionRow {
	row := electionRow{Algo: a.Name, Variant: a.Variant, N: n, BoundKinds: a.BoundKinds, ByKind: map[string]float64{},
		TimeMeanMS: math.NaN(), TimeMaxMS: math.NaN(), MessagesAgreedMean: math.NaN(), MessagesMin: -1}
	if a.Bound != nil {
		b := a.Bound(n)
		row.Bound = &b
	}
	var one, right, agreed, sum, all, tsum, asum float64
	for k, oc := range runs {
		if oc.err != nil {
			if row.Error == "" {
				row.Error = oc.err.Error()
			}
			continue
		}
		row.Runs++
		if oc.v.OneLeader {
			one++
		}
		if oc.v.RightLeader {
			right++
		}
		if (!oc.v.OneLeader || !oc.v.RightLeader) && len(row.Failures) < 3 {
			row.Failures = append(row.Failures, fmt.Sprintf("seed %d: %s", electionSeed(seed, k), oc.v.Note))
		}
		sum += float64(oc.counted)
		all += float64(oc.all)
		row.MessagesMax = max(row.MessagesMax, oc.counted)
		if row.MessagesMin < 0 || oc.counted < row.MessagesMin {
			row.MessagesMin = oc.counted
		}
		for kind, c := range oc.byKind {
			row.ByKind[kind] += float64(c)
		}
		if oc.agreed >= 0 {
			t := float64(oc.agreed) / float64(time.Millisecond)
			agreed++
			tsum += t
			asum += float64(oc.agreedMsgs)
			if math.IsNaN(row.TimeMaxMS) || t > row.TimeMaxMS {
				row.TimeMaxMS = t
			}
		}
	}
	if row.Runs == 0 {
		row.OneLeader, row.RightLeader, row.MessagesMean, row.MessagesAllMean, row.Agreed = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		row.MessagesMin = 0
		return row
	}
	rn := float64(row.Runs)
	row.OneLeader, row.RightLeader, row.Agreed = one/rn, right/rn, agreed/rn
	row.MessagesMean, row.MessagesAllMean = sum/rn, all/rn
	for kind := range row.ByKind {
		row.ByKind[kind] /= rn
	}
	if agreed > 0 {
		row.TimeMeanMS, row.MessagesAgreedMean = tsum/agreed, asum/agreed
	}
	return row
}

// traceOne runs seed 0 of algorithm a at n with the trace on and writes
// o.Trace.txt and .svg, if it is the single one traced; when the variants of one algorithm are traced,
// o.Trace-<variant>.* for each but the plain one, and when several
// algorithms are, o.Trace-<name>[-<variant>].*.
func traceOne(o Options, a elections.Algorithm, n int, single, sameName bool) (electionTrace, error) {
	seed := electionSeed(o.Seed, 0)
	base := o.Trace
	if ext := filepath.Ext(base); ext == ".svg" || ext == ".txt" {
		base = strings.TrimSuffix(base, ext)
	}
	switch {
	case single:
	case sameName && a.Variant != "":
		base += "-" + a.Variant
	case !sameName:
		base += "-" + strings.ReplaceAll(a.Key(), "/", "-")
	}
	var res elections.Result
	var v elections.Verdict
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		res, v, err = a.Run(n, seed, true)
		return err
	}()
	if err != nil {
		return electionTrace{}, err
	}
	ok := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	title := fmt.Sprintf("%s, n = %d, seed %d: one leader %s, right leader %s; %d messages", a.Key(), n, seed, ok(v.OneLeader), ok(v.RightLeader), res.Messages)
	if a.Bound != nil {
		title += fmt.Sprintf(" (%d counted, bound %s)", a.Counted(res), report.Format(a.Bound(n)))
	}
	if v.Note != "" {
		title += "; " + v.Note
	}
	c := elections.Chart{Title: title, Result: res, Faults: a.Scenario(n, seed).Faults}
	var txt, svg bytes.Buffer
	if err := c.WriteText(&txt); err != nil {
		return electionTrace{}, err
	}
	if err := c.WriteSVG(&svg); err != nil {
		return electionTrace{}, err
	}
	if dir := filepath.Dir(base); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return electionTrace{}, err
		}
	}
	tr := electionTrace{Algo: a.Name, Variant: a.Variant, N: n, Seed: seed, Events: len(res.Trace), Messages: res.Messages,
		OneLeader: v.OneLeader, RightLeader: v.RightLeader, Note: v.Note}
	for _, f := range []struct {
		ext string
		b   []byte
	}{{".txt", txt.Bytes()}, {".svg", svg.Bytes()}} {
		if err := os.WriteFile(base+f.ext, f.b, 0o644); err != nil {
			return electionTrace{}, err
		}
		tr.Files = append(tr.Files, base+f.ext)
	}
	return tr, nil
}

// plotElections draws messages against n, one figure per algorithm and
// variant with the mean, the maximum and the bound; the mean of each
// algorithm's plain variant in one figure; and their time to agreement
// against n.
func plotElections(r *report.Run, algos []elections.Algorithm, rows []electionRow) error {
	byKey := map[string][]electionRow{}
	for _, row := range rows {
		k := key(row.Algo, row.Variant)
		byKey[k] = append(byKey[k], row)
	}
	column := func(rs []electionRow, f func(electionRow) float64) (xs, ys []float64) {
		for _, row := range rs {
			xs = append(xs, float64(row.N))
			ys = append(ys, f(row))
		}
		return xs, ys
	}
	var all, times []report.Series
	overview := map[string]bool{}
	for _, a := range algos {
		rs := byKey[a.Key()]
		counted := "messages"
		if a.BoundKinds != nil {
			counted = strings.Join(a.BoundKinds, "+") + " messages"
		}
		xs, mean := column(rs, func(r electionRow) float64 { return r.MessagesMean })
		_, mx := column(rs, func(r electionRow) float64 { return float64(r.MessagesMax) })
		series := []report.Series{{Name: "measured mean", X: xs, Y: mean, Points: true}, {Name: "measured max", X: xs, Y: mx, Points: true}}
		if a.Bound != nil {
			_, bd := column(rs, func(r electionRow) float64 { return *r.Bound })
			series = append(series, report.Series{Name: "bound", X: xs, Y: bd})
		}
		f := logAxes(report.Figure{Title: a.Key() + ": messages per election vs n", X: "nodes n", Y: counted, Legend: "top-left"}, series)
		if err := r.Lines("messages-"+strings.ReplaceAll(a.Key(), "/", "-"), f, series); err != nil {
			return err
		}
		// The overview has one curve per algorithm: its plain variant, or
		// its first if it has none.
		if !overview[a.Name] {
			overview[a.Name] = true
			all = append(all, report.Series{Name: a.Key(), X: xs, Y: mean, Points: true})
			_, tm := column(rs, func(r electionRow) float64 { return r.TimeMeanMS })
			times = append(times, report.Series{Name: a.Key(), X: xs, Y: tm, Points: true})
		}
	}
	w, h := 7*vg.Inch, max(4*vg.Inch, vg.Length(len(all))*0.5*vg.Inch)
	f := logAxes(report.Figure{Title: "messages per election vs n (mean, as each bound counts them)", X: "nodes n", Y: "messages", Legend: "top-left", Width: w, Height: h}, all)
	if err := r.Lines("messages", f, all); err != nil {
		return err
	}
	f = logAxes(report.Figure{Title: "time to agreement vs n (mean over the runs that agreed)", X: "nodes n", Y: "virtual time (ms)", Legend: "top-left", Width: w, Height: h}, times)
	return r.Lines("time", f, times)
}

// logAxes puts an axis on a log scale when its values span two powers of
// ten or more: gonum labels only those on a log axis, so a narrower range
// reads better on a linear one.
func logAxes(f report.Figure, series []report.Series) report.Figure {
	span := func(get func(report.Series) []float64) bool {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range series {
			for _, v := range get(s) {
				if v > 0 && !math.IsInf(v, 0) {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
		}
		return hi > lo && math.Floor(math.Log10(hi))-math.Ceil(math.Log10(lo)) >= 1
	}
	f.LogX = span(func(s report.Series) []float64 { return s.X })
	f.LogY = span(func(s report.Series) []float64 { return s.Y })
	return f
}

func key(algo, variant string) string {
	if variant == "" {
		return algo
	}
	return algo + "/" + variant
}
