package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/elections"
	"github.com/superpeer-overlay/superpeer/experiments/exp"
	"github.com/superpeer-overlay/superpeer/experiments/report"
)

func init() {
	commands["experiment"] = command{
		summary: "run a named, reproducible experiment (peer experiment list)",
		run:     runExperiment,
	}
}

func runExperiment(args []string, stdout, stderr io.Writer) error {
	names := strings.Join(exp.Names(), ", ")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("%w: missing experiment name: peer experiment NAME [--quick] [--seed N] [--out DIR], NAME one of list, %s", errUsage, names)
	}
	name := args[0]
	if name == "list" {
		fs := newFlagSet("experiment list", stderr)
		fs.SetOutput(io.Discard)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		for _, e := range exp.List() {
			fmt.Fprintf(stdout, "%-16s %s\n", e.Name, e.Summary)
		}
		return nil
	}
	e, ok := exp.Lookup(name)
	if !ok {
		return fmt.Errorf("%w: unknown experiment %q (%s)", errUsage, name, names)
	}
	fs := newFlagSet("experiment "+name, stderr)
	quick := fs.Bool("quick", false, "the small size (about a minute) instead of the full one")
	seed := fs.Int64("seed", 1, "seed of everything random; the same seed gives the same numbers (simulator) or the same within noise (live swarm)")
	out := fs.String("out", report.DefaultRoot, "results root: results go to OUT/"+name+"/RUN-ID/")
	id := fs.String("id", "", "run directory name (default: start time, size and seed)")
	timeout := fs.Duration("timeout", 2*time.Hour, "give up after this long")
	var algo, trace, method, where string
	var n, exploreFirst int
	dilate := 1.0
	var phases []int
	if name == "growth" {
		fs.Func("phases", "network sizes in turn, `N,N,...` (default: the experiment's own)", func(v string) error {
			for _, f := range strings.Split(v, ",") {
				k, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || k < 1 || k > 10_000_000 {
					return fmt.Errorf("phase %q: want a size in [1, 10^7]", f)
				}
				phases = append(phases, k)
			}
			return nil
		})
		fs.StringVar(&method, "method", "", "only this method's rows: prefix or repel (default both)")
		fs.StringVar(&where, "where", "", "only the simulator's rows (sim) or the live swarms' (live) (default both)")
		fs.Float64Var(&dilate, "dilate", 1, "the live token swarm's time dilation once its DHT has converged, as peer swarm --dilate (needs --method repel --where live)")
	}
	if name == "repel" {
		fs.IntVar(&exploreFirst, "explore-first", 0, "clients explore a holder at every step while they have measured fewer than `N` (repel.WithExploreFirst; default 0: the selector's default)")
	}
	if name == "elections" {
		fs.StringVar(&algo, "algo", "", "only the algorithms of this name (every variant) or name/variant: "+strings.Join(electionKeys(), ", "))
		fs.IntVar(&n, "n", 0, "only this many nodes (default: each algorithm's sizes)")
		fs.StringVar(&trace, "trace", "", "trace the first run at the smallest n to `FILE`.txt and FILE.svg (a sequence chart; n ≤ 64)")
	}
	// Errors are one line (from run); the flag list only on --help.
	fs.SetOutput(io.Discard)
	if err := parseFlags(fs, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout %v must be positive", errUsage, *timeout)
	}
	if *out == "" {
		return fmt.Errorf("%w: --out must not be empty", errUsage)
	}
	if algo != "" && len(elections.Lookup(algo)) == 0 {
		return fmt.Errorf("%w: unknown --algo %q (%s)", errUsage, algo, strings.Join(electionKeys(), ", "))
	}
	if method != "" && method != "prefix" && method != "repel" {
		return fmt.Errorf("%w: --method %q: want prefix or repel", errUsage, method)
	}
	if where != "" && where != "sim" && where != "live" {
		return fmt.Errorf("%w: --where %q: want sim or live", errUsage, where)
	}
	if !(dilate >= 1) || dilate > 1000 {
		return fmt.Errorf("%w: --dilate %v must be in [1, 1000]", errUsage, dilate)
	}
	if dilate != 1 && (method != "repel" || where != "live") {
		return fmt.Errorf("%w: --dilate needs --method repel --where live (the prefix selector's timers do not follow it; the simulator has no machine to outpace)", errUsage)
	}
	if exploreFirst < 0 {
		return fmt.Errorf("%w: --explore-first %d must not be negative", errUsage, exploreFirst)
	}
	if n < 0 {
		return fmt.Errorf("%w: --n %d must be positive", errUsage, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	_, err := e.Run(exp.Options{Ctx: ctx, Quick: *quick, Seed: *seed, Out: *out, ID: *id, Stdout: stdout, Stderr: stderr,
		Algo: algo, N: n, Trace: trace, Method: method, Where: where, Phases: phases, ExploreFirst: exploreFirst, Dilate: dilate})
	return err
}

// electionKeys lists the election algorithms --algo takes, by key.
func electionKeys() []string {
	var keys []string
	for _, a := range elections.Algorithms() {
		keys = append(keys, a.Key())
	}
	return keys
}
