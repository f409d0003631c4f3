package exp

import (
	"fmt"

	"gonum.org/v1/plot/vg"

	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/vivaldieval"
)

func init() {
	register(Experiment{
		Name:    "vivaldi",
		Summary: "Vivaldi error vs rounds, ours vs hashicorp/serf, on the shipped and generated matrices; the simulator with message delays at scale",
		run:     runVivaldi,
	})
}

type vivParams struct {
	common
	Matrices        []string `json:"matrices"`
	SyntheticHosts  int      `json:"synthetic_hosts"`
	Rounds          int      `json:"rounds"`
	Checkpoints     []int    `json:"checkpoints"`
	Schedule        string   `json:"schedule"`
	SimMatrix       string   `json:"sim_matrix"`
	SimN            []int    `json:"sim_n"`
	SimRounds       int      `json:"sim_rounds"`
	SimNeighbors    string   `json:"sim_neighbors"`
	ToleranceMedian float64  `json:"tolerance_median"`
}

func runVivaldi(o Options, r *report.Run) error {
	p := vivParams{common: commonOf(o), Schedule: vivaldieval.ScheduleRandom,
		Matrices:     []string{"planetlab-490", "seattle-99", "synthetic", "synthetic:clusters", "synthetic:heavytail"},
		SimMatrix:    "synthetic:clusters",
		SimNeighbors: "16 near (lowest RTT of 128 random candidates) + 16 random; request/reply with RTT/2 delays",
		// The simulator (fixed neighbours, delayed coordinates) and
		// vivaldieval (random peers, instantaneous) schedule samples
		// differently; their final medians on PlanetLab should be within this.
		ToleranceMedian: 0.05,
	}
	if o.Quick {
		p.SyntheticHosts, p.Rounds = 300, 200
		p.Checkpoints = []int{5, 10, 20, 50, 100, 200}
		p.SimN, p.SimRounds = []int{1000, 10_000}, 50
	} else {
		p.SyntheticHosts, p.Rounds = 490, 1000
		p.Checkpoints = []int{5, 10, 20, 50, 100, 200, 500, 1000}
		p.SimN, p.SimRounds = []int{1000, 10_000, 100_000}, 100
	}
	t := report.NewTable("matrix", "hosts", "rounds", "ours median", "ours p90", "serf median", "serf p90")
	var results []*vivaldieval.Result
	var series []report.Series
	for _, spec := range p.Matrices {
		m, name, err := matrixOf(spec, p.SyntheticHosts, o.Seed)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.Stderr, "vivaldi on %s (%d hosts)...\n", name, m.Len())
		res, err := vivaldieval.Run(vivaldieval.Options{Matrix: m, Name: name, Rounds: p.Rounds, Schedule: p.Schedule, Seed: o.Seed, Checkpoints: p.Checkpoints})
		if err != nil {
			return err
		}
		results = append(results, res)
		var xs, ours, serf []float64
		for _, c := range res.Checkpoints {
			xs = append(xs, float64(c.Round))
			ours = append(ours, c.Median)
			serf = append(serf, c.SerfMedian)
		}
		series = append(series, report.Series{Name: spec + " ours", X: xs, Y: ours, Points: true}, report.Series{Name: spec + " serf", X: xs, Y: serf})
		last := res.Checkpoints[len(res.Checkpoints)-1]
		t.Add(spec, res.Nodes, res.Rounds, last.Median, last.P90, last.SerfMedian, last.SerfP90)
	}
	if err := r.Lines("error-vs-rounds", report.Figure{Title: "Vivaldi median relative error, ours vs serf", X: "rounds", Y: "median |pred − true| / true", LogX: true, LogY: true, Legend: "bottom-left", Height: 6 * vg.Inch}, series); err != nil {
		return err
	}
	if err := printTable(o, r, "matrices", "Vivaldi relative error after the last round (all pairs)", t); err != nil {
		return err
	}
	// The simulator: the same model with message delays, at scale.
	st := report.NewTable("space", "peers", "rounds", "median", "p90", "pairs scored", "updates", "seconds")
	var simSeries []report.Series
	var simRes []map[string]any
	simRuns := []struct {
		spec string
		n    int
	}{{"planetlab-490", 490}}
	for _, n := range p.SimN {
		simRuns = append(simRuns, struct {
			spec string
			n    int
		}{p.SimMatrix, n})
	}
	var plSimMedian float64
	for _, sr := range simRuns {
		rtt, _, err := space(sr.spec, sr.n, o.Seed)
		if err != nil {
			return err
		}
		rounds := p.SimRounds
		if sr.n <= 490 {
			rounds = p.Rounds
		}
		bar := report.NewProgress(o.Stderr, fmt.Sprintf("sim vivaldi %d", sr.n), rounds)
		start := nowFunc()
		vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: o.Seed, Rounds: rounds, Checkpoints: p.Checkpoints, Progress: func(d, _ int) { bar.Set(d) }})
		bar.Finish()
		if err != nil {
			return err
		}
		secs := nowFunc().Sub(start).Seconds()
		var xs, ys []float64
		for _, c := range vr.Checkpoints {
			xs = append(xs, float64(c.Round))
			ys = append(ys, c.Median)
		}
		label := fmt.Sprintf("%s n=%d", sr.spec, sr.n)
		simSeries = append(simSeries, report.Series{Name: label, X: xs, Y: ys, Points: true})
		last := vr.Checkpoints[len(vr.Checkpoints)-1]
		if sr.spec == "planetlab-490" {
			plSimMedian = last.Median
		}
		st.Add(sr.spec, sr.n, rounds, last.Median, last.P90, vr.Pairs, vr.Updates, secs)
		simRes = append(simRes, map[string]any{"space": sr.spec, "n": sr.n, "seconds": secs, "result": vr})
	}
	if err := r.Lines("sim-error-vs-rounds", report.Figure{Title: "simulated Vivaldi (delayed messages), median relative error", X: "rounds", Y: "median relative error", LogX: true, LogY: true, Legend: "bottom-left"}, simSeries); err != nil {
		return err
	}
	if err := printTable(o, r, "simulator", "simulated Vivaldi at scale (random pairs beyond 2000 peers)", st); err != nil {
		return err
	}
	evalMedian := results[0].Checkpoints[len(results[0].Checkpoints)-1].Median
	agree := abs(plSimMedian-evalMedian) <= p.ToleranceMedian
	fmt.Fprintf(o.Stdout, "\nPlanetLab median error: simulator %.3f, vivaldieval %.3f: within %.2f: %v\n", plSimMedian, evalMedian, p.ToleranceMedian, agree)
	return r.WriteResults(p, map[string]any{"matrices": results, "simulator": simRes,
		"planetlab_agreement": map[string]any{"simulator_median": plSimMedian, "eval_median": evalMedian, "within_tolerance": agree}})
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
