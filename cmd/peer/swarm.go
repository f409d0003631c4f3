package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

func init() {
	commands["swarm"] = command{
		summary: "run n peers in this process over real latencies and report on them",
		run:     runSwarm,
	}
}

// swarmReport is the JSON report of `peer swarm --json`. Other tools read
// it: fields are only ever added.
type swarmReport struct {
	N               int               `json:"n"`
	Seed            int64             `json:"seed"`
	Latency         string            `json:"latency"`
	Transport       string            `json:"transport"`
	BuildSeconds    float64           `json:"build_seconds"`
	ConvergeSeconds float64           `json:"converge_seconds"`
	RSSBytes        uint64            `json:"rss_bytes"`
	Goroutines      int               `json:"goroutines"`
	Links           int               `json:"links"`
	Lookup          swarm.LookupCheck `json:"lookup"`
	RawLookup       swarm.LookupCheck `json:"raw_lookup"`
	Peers           []peerReport      `json:"peers"`
}

type peerReport struct {
	ID   string `json:"id"`
	Key  string `json:"key"`
	Host int    `json:"host"`
}

// latencyFlag resolves --latency: a builtin matrix name, "synthetic", or a
// matrix file; the result is placed for n peers.
func openLatency(spec string, n int, seed int64) (*latency.Placement, string, error) {
	var base latency.RTTs
	name := spec
	switch {
	case spec == "synthetic" || strings.HasPrefix(spec, "synthetic:"):
		cfg := latency.DefaultSyntheticConfig()
		for _, opt := range strings.Split(strings.TrimPrefix(strings.TrimPrefix(spec, "synthetic"), ":"), ",") {
			switch opt {
			case "":
			case "clusters":
				cfg.Clusters = 8
			case "heavytail":
				cfg.HeavyTail = true
			default:
				return nil, "", fmt.Errorf("%w: --latency %s: unknown synthetic option %q (clusters, heavytail)", errUsage, spec, opt)
			}
		}
		s := latency.NewSynthetic(n, seed, cfg)
		base, name = s, s.Name
	default:
		m, err := latency.Open(spec)
		if err != nil {
			return nil, "", err
		}
		base, name = m.Filled(), m.Name
	}
	pl, err := latency.Place(base, n, seed)
	if err != nil {
		return nil, "", err
	}
	return pl, name, nil
}

func runSwarm(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("swarm", stderr)
	n := fs.Int("n", 300, "number of peers")
	lat := fs.String("latency", latency.Default, "latency source: planetlab-490, seattle-99, synthetic[:clusters,heavytail] or a matrix file")
	seed := fs.Int64("seed", 0, "random seed (0 picks one from the clock; it is printed)")
	jsonOut := fs.String("json", "", "write the machine-readable report to this file")
	lookups := fs.Int("lookups", 100, "random-key lookups to check after convergence")
	rounds := fs.Int("max-rounds", 20, "refresh rounds before giving up on convergence")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *n < 2 {
		return fmt.Errorf("%w: --n %d: need at least 2 peers", errUsage, *n)
	}
	if *lookups < 0 || *rounds < 0 || *timeout <= 0 {
		return fmt.Errorf("%w: --lookups, --max-rounds and --timeout must not be negative", errUsage)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_007
	}
	fmt.Fprintf(stdout, "seed %d (rerun with --seed %d)\n", *seed, *seed)

	pl, latName, err := openLatency(*lat, *n, *seed)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()

	bar := newProgress(stderr)
	s, err := swarm.New(ctx, swarm.Config{N: *n, Seed: *seed, RTT: pl, HostOf: pl.Host, Progress: bar.update})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Join(ctx); err != nil {
		return err
	}
	if err := s.WaitConverged(ctx, *rounds); err != nil {
		return err
	}
	bar.done()
	rng := rand.New(rand.NewSource(*seed + 2))
	rep := swarmReport{
		N: *n, Seed: *seed, Latency: latName, Transport: "mocknet",
		BuildSeconds:    s.BuildTime.Seconds(),
		ConvergeSeconds: s.ConvergeTime.Seconds(),
		RSSBytes:        swarm.RSS(),
		Goroutines:      swarm.Goroutines(),
		Links:           s.Links(),
		Lookup:          s.CheckLookups(ctx, *lookups, false, rng),
		RawLookup:       s.CheckLookups(ctx, *lookups, true, rng),
	}
	for _, p := range s.Peers {
		rep.Peers = append(rep.Peers, peerReport{ID: p.Host.ID().String(), Key: p.Key.Hex(), Host: s.HostOf(p.Index)})
	}
	fmt.Fprintf(stdout, "peers            %d over %s (mocknet, %d links)\n", rep.N, rep.Latency, rep.Links)
	fmt.Fprintf(stdout, "build            %.1f s\n", rep.BuildSeconds)
	fmt.Fprintf(stdout, "converge         %.1f s\n", rep.ConvergeSeconds)
	fmt.Fprintf(stdout, "memory           %.1f MiB RSS, %.2f MiB per peer\n", mib(rep.RSSBytes), mib(rep.RSSBytes)/float64(rep.N))
	fmt.Fprintf(stdout, "goroutines       %d, %.1f per peer\n", rep.Goroutines, float64(rep.Goroutines)/float64(rep.N))
	fmt.Fprintf(stdout, "kad requests     %d, %.0f per peer\n", s.KadMessages(), float64(s.KadMessages())/float64(rep.N))
	fmt.Fprintf(stdout, "kad lookups      %d of %d exact\n", rep.Lookup.Exact, rep.Lookup.Tried)
	fmt.Fprintf(stdout, "raw-key lookups  %d of %d exact\n", rep.RawLookup.Exact, rep.RawLookup.Tried)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report           %s\n", *jsonOut)
	}
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress prints stage progress to a terminal with \r, or a line every few
// seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	stage string
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty, start: time.Now()}
}

func (p *progress) update(stage string, done, total int) {
	now := time.Now()
	newStage := stage != p.stage
	if !newStage && done != total && now.Sub(p.last) < p.interval() {
		return
	}
	if newStage && p.stage != "" && p.tty {
		fmt.Fprintln(p.w)
	}
	p.stage, p.last = stage, now
	msg := fmt.Sprintf("%-9s %6d/%-6d %5.1f%%  %6.1fs", stage, done, total, 100*float64(done)/float64(max(total, 1)), now.Sub(p.start).Seconds())
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
}

func (p *progress) interval() time.Duration {
	if p.tty {
		return 100 * time.Millisecond
	}
	return 5 * time.Second
}

func (p *progress) done() {
	if p.tty && p.stage != "" {
		fmt.Fprintln(p.w)
	}
}
