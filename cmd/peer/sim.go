package main

import (
	"fmt"
	"io"
	"math/rand"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
)

func init() {
	commands["sim"] = command{"run selection methods in the simulator, side by side with random and the k-median", runSim}
}

// simReport is `peer sim --json`'s report.
type simReport struct {
	N       int             `json:"n"`
	Seed    int64           `json:"seed"`
	Latency string          `json:"latency"`
	Args    []string        `json:"args"`
	Methods []*methodReport `json:"methods"`
}

func runSim(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim", stderr)
	n := fs.Int("n", 490, "number of peers")
	lat := fs.String("latency", latency.Default, "latency source: planetlab-490, seattle-99, synthetic[:clusters,heavytail] or a matrix file")
	seed := fs.Int64("seed", 0, "random seed (0 picks one from the clock; it is printed)")
	method := fs.String("method", "all", "methods to simulate: all (every registered method with a simulator), or names separated by commas")
	superpeers := fs.Int("superpeers", 16, "S, the number of superpeers wanted")
	capacity := fs.Int("capacity", 0, "C, the most clients a superpeer serves (0: twice the mean load, 2⌈n/S⌉)")
	jsonOut := fs.String("json", "", "write the machine-readable report to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	methods, err := parseMethods(*method)
	switch {
	case err != nil:
		return err
	case len(methods) == 0:
		return fmt.Errorf("%w: --method none: nothing to simulate", errUsage)
	case *n < 2:
		return fmt.Errorf("%w: --n %d: need at least 2 peers", errUsage, *n)
	case *superpeers < 1 || *superpeers >= *n:
		return fmt.Errorf("%w: --superpeers %d must be in [1, n)", errUsage, *superpeers)
	case *capacity < 0:
		return fmt.Errorf("%w: --capacity %d is negative", errUsage, *capacity)
	}
	pl, latName, err := placePeers(*lat, *n, *superpeers, capacity, seed, stdout)
	if err != nil {
		return err
	}
	ids, keys, err := sim.Identities(*seed, *n, nil)
	if err != nil {
		return err
	}
	// The yardsticks, over the same peers for every method.
	rndEv, kmEv, err := yardsticks(pl, *superpeers, *capacity, *seed)
	if err != nil {
		return err
	}
	rep := simReport{N: *n, Seed: *seed, Latency: latName, Args: args}
	env := sim.Env{RTT: pl, IDs: ids, Keys: keys, Superpeers: *superpeers, Capacity: *capacity, Seed: *seed}
	for _, m := range methods {
		start := time.Now()
		out, err := sim.Run(m.Name, env)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		ev, err := metrics.Evaluate(pl, out.Assignment, out.Superpeers, *capacity)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		sum := &swarm.SelectionSummary{
			Method: m.Name, Target: *superpeers, Groups: *superpeers, Expected: float64(*superpeers), Capacity: *capacity,
			Count:               len(out.Superpeers),
			ClientsPerSuperpeer: swarm.LoadSummary{Max: ev.Load.Max, Mean: ev.Load.Mean, Gini: ev.Load.Gini},
			ClientRTT:           rttSummary(ev),
			RandomClientRTT:     rttSummary(rndEv),
			KMedianClientRTT:    rttSummary(kmEv),
			Unserved:            ev.Unserved,
			ConvergeSeconds:     out.Seconds,
		}
		if pev, err := metrics.Evaluate(pl, metrics.AssignWithCapacity(pl, out.Superpeers, *capacity), out.Superpeers, *capacity); err == nil {
			sum.PlacementClientRTT = rttSummary(pev)
		}
		mr := &methodReport{Method: m.Name, Superpeers: sum, SuperpeerOf: make([]int, *n)}
		for i, j := range out.Assignment {
			mr.SuperpeerOf[i] = max(j, -1)
		}
		rep.Methods = append(rep.Methods, mr)
		fmt.Fprintf(stderr, "%s: %.1f s\n", m.Name, time.Since(start).Seconds())
	}
	fmt.Fprintf(stdout, "peers            %d over %s (simulated; converge times are virtual)\n", *n, latName)
	printMethods(stdout, rep.Methods)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report           %s\n", *jsonOut)
	}
	return nil
}

// placePeers settles the defaults a swarm and a simulation share — C =
// 2⌈n/S⌉ when zero, a seed from the clock when zero, printed — and places
// the n peers on the latency source.
func placePeers(lat string, n, S int, capacity *int, seed *int64, stdout io.Writer) (*latency.Placement, string, error) {
	if *capacity == 0 {
		*capacity = 2 * ((n + S - 1) / S)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_007
	}
	fmt.Fprintf(stdout, "seed %d (rerun with --seed %d)\n", *seed, *seed)
	return openLatency(lat, n, *seed)
}

// yardsticks scores S random superpeers (drawn with the seed) and a greedy
// k-median over the RTTs, every client with its nearest that has room.
func yardsticks(rtt latency.RTTs, S, capacity int, seed int64) (random, kmedian metrics.Evaluation, err error) {
	rnd := metrics.RandomSuperpeers(rtt.Len(), S, rand.New(rand.NewSource(seed+3)))
	if random, err = metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, rnd, capacity), rnd, capacity); err != nil {
		return
	}
	km := metrics.GreedyKMedian(rtt, S)
	kmedian, err = metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, km, capacity), km, capacity)
	return
}

func rttSummary(ev metrics.Evaluation) swarm.RTTSummary {
	return swarm.RTTSummary{Mean: ev.ClientRTT.Mean, P50: ev.ClientRTT.P50, P90: ev.ClientRTT.P90}
}
