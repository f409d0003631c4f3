package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/vivaldieval"
)

func init() {
	commands["eval"] = command{
		summary: "evaluate a component on a latency matrix (eval vivaldi --matrix ...)",
		run:     runEval,
	}
}

func runEval(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: peer eval vivaldi [flags]")
		return fmt.Errorf("%w: missing what to evaluate (vivaldi)", errUsage)
	}
	switch args[0] {
	case "vivaldi":
		return runEvalVivaldi(args[1:], stdout, stderr)
	default:
		return fmt.Errorf("%w: unknown evaluation %q (vivaldi)", errUsage, args[0])
	}
}

func runEvalVivaldi(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("eval vivaldi", stderr)
	matrix := fs.String("matrix", latency.Default, "latency matrix: a file, planetlab-490, seattle-99, or synthetic[:clusters|:heavytail]")
	nodes := fs.Int("nodes", 400, "hosts of a synthetic matrix")
	rounds := fs.Int("rounds", 500, "rounds; each node takes one sample per round")
	dims := fs.Int("dims", 0, "dimensions of our model (0: its default); serf keeps its own 8")
	schedule := fs.String("schedule", vivaldieval.ScheduleRandom, "sampling schedule: random or neighbors (32 fixed random neighbours)")
	seed := fs.Int64("seed", 1, "seed of the schedule, the models and synthetic matrices")
	jitter := fs.Float64("jitter", 0, "multiply each sample by 1+jitter·Exp(1) (queueing noise); 0 for the matrix value")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *rounds < 1:
		return fmt.Errorf("%w: --rounds %d must be ≥ 1", errUsage, *rounds)
	case *dims < 0:
		return fmt.Errorf("%w: --dims %d must be ≥ 0", errUsage, *dims)
	case *schedule != vivaldieval.ScheduleRandom && *schedule != vivaldieval.ScheduleNeighbors:
		return fmt.Errorf("%w: --schedule %q: want random or neighbors", errUsage, *schedule)
	case *nodes < 2 || *nodes > latency.MaxHosts:
		return fmt.Errorf("%w: --nodes %d not in [2, %d]", errUsage, *nodes, latency.MaxHosts)
	case *jitter < 0:
		return fmt.Errorf("%w: --jitter %v must be ≥ 0", errUsage, *jitter)
	}
	m, name, err := openMatrix(*matrix, *nodes, *seed)
	if err != nil {
		return err
	}
	res, err := vivaldieval.Run(vivaldieval.Options{
		Matrix: m, Name: name, Rounds: *rounds, Schedule: *schedule,
		Seed: *seed, Dims: *dims, Jitter: *jitter,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "vivaldi eval: matrix %s (%d hosts), schedule %s, seed %d, %d rounds\n",
		res.Matrix, res.Nodes, res.Schedule, res.Seed, res.Rounds)
	fmt.Fprintf(stdout, "ours: %d dims + height, %d samples; serf: %d dims + height, %d samples\n",
		res.Dims, res.Samples, res.SerfDims, res.SerfSamples)
	fmt.Fprintln(stdout, "relative error |predicted - true| / true over all pairs:")
	fmt.Fprintf(stdout, "%6s  %8s  %8s  %11s  %9s\n", "round", "median", "p90", "serf_median", "serf_p90")
	for _, c := range res.Checkpoints {
		fmt.Fprintf(stdout, "%6d  %8.3f  %8.3f  %11.3f  %9.3f\n", c.Round, c.Median, c.P90, c.SerfMedian, c.SerfP90)
	}
	return nil
}

// openMatrix resolves a latency spec (--matrix, --latency):
// synthetic[:clusters][,heavytail] is generated with nodes hosts from seed;
// anything else goes to latency.Open.
func openMatrix(spec string, nodes int, seed int64) (latency.RTTs, string, error) {
	cfg, ok, err := latency.ParseSyntheticSpec(spec)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %v", errUsage, spec, err)
	}
	if ok {
		s := latency.NewSynthetic(nodes, seed, cfg)
		return s, s.Name, nil
	}
	m, err := latency.Open(spec)
	if err != nil {
		return nil, "", err
	}
	if m.Len() < 2 {
		return nil, "", fmt.Errorf("latency matrix %s: %d hosts, need at least 2", m.Name, m.Len())
	}
	return m, m.Name, nil
}
