// Package exp holds the named, reproducible experiments behind
// `peer experiment NAME`: each takes a seed and a size (quick or full),
// writes results.json, one CSV per table and PNG+SVG plots under
// <out>/<experiment>/<run-id>/ (package report), prints a summary table and
// shows progress while it runs. See experiments/README.md for what each
// measures and the figures of a full run.
package exp

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
)

// Options are what every experiment takes.
type Options struct {
	Ctx context.Context
	// Quick runs the small size (about a minute); otherwise the full size.
	Quick bool
	Seed  int64
	// Out is the results root (default "results").
	Out string
	// ID names the run directory; "" is the start time and the seed.
	ID             string
	Stdout, Stderr io.Writer
	// Algo, N and Trace narrow the elections experiment: the algorithms
	// elections.Lookup finds by Algo ("" every one), the one size N (0
	// each algorithm's own), and Trace, a file name without extension:
	// the first run at the smallest size is traced to Trace.txt and
	// Trace.svg (a sequence chart). Other experiments ignore them.
	Algo  string
	N     int
	Trace string
	// Method and Where narrow the growth experiment to one method's rows
	// ("prefix" or "repel"; "" both) and to the simulator's or the live
	// swarm's ("sim" or "live"; "" both).
	Method, Where string
	// Phases, if set, are the growth experiment's network sizes in turn,
	// for the simulator's rows and the live swarms' alike.
	Phases []int
	// ExploreFirst, if positive, has the repel experiment's clients
	// explore at every step while they have measured fewer holders than
	// this (repel.AttachConfig.ExploreFirst; 0: the default choice's).
	ExploreFirst int
	// Dilate, if above 1, stretches the growth experiment's live token
	// swarm's time by this factor (growthParams.LiveDilate).
	Dilate float64
	// tiny shrinks an experiment further than Quick, for tests.
	tiny bool
	// liarSeeds, if set, runs the coordinate liars' goal rows alone (the
	// goal's fraction, without and with the full defence, full rounds)
	// over this many seeds (TestAttacks_LiarsGoalSeeds).
	liarSeeds int
	// liarCoordCheck, if set, is the repel.Config.CoordCheck the
	// coordinate liars' rows with the defence run with (the product's
	// default, 0, otherwise).
	liarCoordCheck float64
}

// Experiment is one named experiment.
type Experiment struct {
	Name    string
	Summary string
	run     func(o Options, r *report.Run) error
}

var registry = map[string]Experiment{}

func register(e Experiment) { registry[e.Name] = e }

// List returns the experiments by name.
func List() []Experiment {
	out := make([]Experiment, 0, len(registry))
	for _, e := range registry {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names lists the experiment names, sorted.
func Names() []string {
	var out []string
	for _, e := range List() {
		out = append(out, e.Name)
	}
	return out
}

// Lookup finds an experiment by name.
func Lookup(name string) (Experiment, bool) {
	e, ok := registry[name]
	return e, ok
}

// Run runs the experiment and returns the directory its results are in.
func (e Experiment) Run(o Options) (string, error) {
	if o.Ctx == nil {
		o.Ctx = context.Background()
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	id := o.ID
	if id == "" {
		size := "full"
		if o.Quick {
			size = "quick"
		}
		id = report.RunID(time.Now(), size+"-seed"+strconv.FormatInt(o.Seed, 10))
	}
	r, err := report.New(o.Out, e.Name, id)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(o.Stdout, "experiment %s, seed %d (rerun with --seed %d), %s, results in %s\n", e.Name, o.Seed, o.Seed, sizeName(o.Quick), r.Dir)
	start := time.Now()
	if err := e.run(o, r); err != nil {
		return r.Dir, err
	}
	fmt.Fprintf(o.Stdout, "done in %s; files in %s\n", time.Since(start).Round(100*time.Millisecond), r.Dir)
	return r.Dir, nil
}

func sizeName(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}

// common are the parameters every experiment records.
type common struct {
	Seed  int64  `json:"seed"`
	Quick bool   `json:"quick"`
	Size  string `json:"size"`
	Go    string `json:"go"`
	CPUs  int    `json:"cpus"`
	// Revision is the commit the binary was built from (go build's VCS
	// stamp), with "+dirty" when the tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
}

func commonOf(o Options) common {
	return common{Seed: o.Seed, Quick: o.Quick, Size: sizeName(o.Quick), Go: runtime.Version(), CPUs: runtime.GOMAXPROCS(0), Revision: revision()}
}

func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// space resolves a latency spec for n peers: a matrix (builtin name or file)
// placed with latency.Place, or "synthetic[:clusters,heavytail]" generated
// with n hosts (O(n) memory).
func space(spec string, n int, seed int64) (latency.RTTs, string, error) {
	cfg, ok, err := latency.ParseSyntheticSpec(spec)
	if err != nil {
		return nil, "", err
	}
	if ok {
		s := latency.NewSynthetic(n, seed, cfg)
		return s, spec, nil
	}
	m, err := latency.Open(spec)
	if err != nil {
		return nil, "", err
	}
	pl, err := latency.Place(m.Filled(), n, seed)
	if err != nil {
		return nil, "", err
	}
	return pl, m.Name, nil
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, 0 if unknown.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// freeMemory returns what the last step left to the OS, so the next
// step's RSS is its own.
func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// printTable writes t to stdout and to name.csv.
func printTable(o Options, r *report.Run, name, title string, t *report.Table) error {
	fmt.Fprintf(o.Stdout, "\n%s\n", title)
	if _, err := t.WriteTo(o.Stdout); err != nil {
		return err
	}
	return r.WriteTable(name, t)
}
