package exp

import (
	"fmt"
	"slices"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "repel-coords",
		Summary: "repel: client RTT over the greedy k-median against the age (rounds, median error) of the Vivaldi coordinates the tokens move in, over seeds",
		run:     runCoords,
	})
}

type coordsParams struct {
	common
	Latency string `json:"latency"`
	N       int    `json:"n"`
	S       int    `json:"s"`
	C       int    `json:"capacity"`
	// Seeds are the runs per row: seed, seed+1, ... (the space, the
	// identities, Vivaldi and the tokens all take the run's seed).
	Seeds   int      `json:"seeds"`
	Rounds  []int    `json:"vivaldi_rounds"`
	Configs []string `json:"configs"`
	Notes   []string `json:"notes"`
}

type coordsRow struct {
	Config string `json:"config"`
	Rounds int    `json:"vivaldi_rounds"`
	// MedianError is the coordinates' median relative error, the mean over
	// the seeds.
	MedianError float64 `json:"median_error"`
	// Ratios are each seed's mean client RTT over its greedy k-median's;
	// Placement the same with the holders' clients attached as the
	// k-median's are (the placement alone).
	Ratios    []float64 `json:"ratios"`
	Placement []float64 `json:"placement"`
	// Settled is each seed's convergence time (virtual seconds).
	Settled []float64 `json:"settled_seconds"`
	Mean    float64   `json:"ratio_mean"`
	Worst   float64   `json:"ratio_max"`
}

func runCoords(o Options, r *report.Run) error {
	p := coordsParams{common: commonOf(o), Latency: latency.Default, N: 490, S: 8, Seeds: 5,
		Rounds:  []int{25, 50, 100, 200, 400, 1000},
		Configs: []string{"default", "swarm", "swarm-deadafter"},
		Notes: []string{
			"each row: sim.SimulateVivaldi for vivaldi_rounds rounds (one exchange per peer per round), then sim.SimulateRepel in those coordinates held fixed, attach as the live selector's (sim.AttachSelector, capacity C = 2⌈n/S⌉, displace superpeer.DefaultDisplace), once per seed",
			"default: repel.DefaultConfig (MaxCandidates 64), as `peer experiment repel`; swarm: swarm.RepelSwarmConfig, what `peer swarm` runs (faster cooling, shorter timers); swarm-deadafter: the same with JoinWait 0, the first mints after a full DeadAfter",
			"settled: the virtual time at which every token was last settled with no move since",
			"a live swarm starts its tokens once the Vivaldi error passes `peer swarm --vivaldi-bound`: 24 samples per peer reach about 0.2 over planetlab-490, 50 about 0.12",
		}}
	if o.Quick {
		p.Seeds, p.Rounds = 2, []int{25, 100, 400}
	}
	if o.tiny {
		p.N, p.S, p.Seeds, p.Rounds, p.Configs = 120, 4, 2, []int{10, 60}, []string{"swarm"}
	}
	p.C = capacityFor(p.N, p.S)
	configOf := func(name string) repel.Config {
		if name == "swarm" || name == "swarm-deadafter" {
			c := swarm.RepelSwarmConfig(p.S, repel.Attract)
			c.MaxCandidates = 64
			if name == "swarm-deadafter" {
				c.JoinWait = 0
			}
			return c
		}
		return repelConfig(p.S)
	}
	rows := map[string]*coordsRow{}
	var order []string
	bar := report.NewProgress(o.Stderr, "runs", p.Seeds*len(p.Rounds)*len(p.Configs))
	done := 0
	for k := 0; k < p.Seeds; k++ {
		seed := o.Seed + int64(k)
		rtt, _, err := space(p.Latency, p.N, seed)
		if err != nil {
			return err
		}
		ids, _, err := sim.Identities(seed, p.N, nil)
		if err != nil {
			return err
		}
		idStrs := make([]string, p.N)
		for i, id := range ids {
			idStrs[i] = string(id)
		}
		km := metrics.GreedyKMedian(rtt, p.S)
		kev, err := metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, km, p.C), km, p.C)
		if err != nil {
			return err
		}
		for _, rounds := range p.Rounds {
			vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: seed, Rounds: rounds})
			if err != nil {
				return err
			}
			med := vr.Checkpoints[len(vr.Checkpoints)-1].Median
			for _, name := range p.Configs {
				rr, err := sim.SimulateRepel(sim.RepelOptions{RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: idStrs,
					Config: configOf(name), Seed: seed, Attach: sim.AttachSelector, Capacity: p.C,
					Choose: repel.DefaultAttachConfig(), Displace: superpeer.DefaultDisplace})
				if err != nil {
					return err
				}
				ev, err := metrics.Evaluate(rtt, rr.Assignment, rr.Superpeers, p.C)
				if err != nil {
					return err
				}
				pl, err := metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, rr.Superpeers, p.C), rr.Superpeers, p.C)
				if err != nil {
					return err
				}
				key := fmt.Sprintf("%s/%d", name, rounds)
				row := rows[key]
				if row == nil {
					row = &coordsRow{Config: name, Rounds: rounds}
					rows[key] = row
					order = append(order, key)
				}
				row.MedianError += med / float64(p.Seeds)
				row.Ratios = append(row.Ratios, ev.ClientRTT.Mean/kev.ClientRTT.Mean)
				row.Placement = append(row.Placement, pl.ClientRTT.Mean/kev.ClientRTT.Mean)
				row.Settled = append(row.Settled, rr.SettledSeconds)
				done++
				bar.Set(done)
			}
		}
	}
	bar.Finish()
	t := report.NewTable("config", "vivaldi rounds", "median error", "/kmed mean", "/kmed max", "placement mean", "settled mean s", "per seed")
	var out []coordsRow
	series := map[string]*report.Series{}
	for _, key := range order {
		row := rows[key]
		row.Mean, row.Worst = metrics.Mean(row.Ratios), slices.Max(row.Ratios)
		out = append(out, *row)
		per := ""
		for _, x := range row.Ratios {
			per += fmt.Sprintf(" %.3f", x)
		}
		t.Add(row.Config, row.Rounds, row.MedianError, row.Mean, row.Worst, metrics.Mean(row.Placement), metrics.Mean(row.Settled), per[1:])
		for _, s := range []struct {
			name string
			y    float64
		}{{row.Config + " mean", row.Mean}, {row.Config + " worst seed", row.Worst}} {
			if series[s.name] == nil {
				series[s.name] = &report.Series{Name: s.name, Points: true}
			}
			series[s.name].X = append(series[s.name].X, row.MedianError)
			series[s.name].Y = append(series[s.name].Y, s.y)
		}
	}
	if err := printTable(o, r, "coords", fmt.Sprintf("repel over coordinates of each age: n = %d, S = %d, C = %d, %s, %d seeds from %d", p.N, p.S, p.C, p.Latency, p.Seeds, o.Seed), t); err != nil {
		return err
	}
	var ss []report.Series
	for _, name := range p.Configs {
		for _, suffix := range []string{" mean", " worst seed"} {
			if s := series[name+suffix]; s != nil {
				ss = append(ss, *s)
			}
		}
	}
	if err := r.Lines("ratio-vs-error", report.Figure{Title: fmt.Sprintf("repel: client RTT / k-median vs Vivaldi error (n = %d, S = %d)", p.N, p.S), X: "median relative error of the coordinates", Y: "client RTT / greedy k-median", Legend: "top-left"}, ss); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"rows": out})
}
