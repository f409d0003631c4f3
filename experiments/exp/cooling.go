package exp

import (
	"fmt"
	"slices"
	"time"

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
		Name:    "repel-cooling",
		Summary: "repel: the live swarm's configuration in the simulator on a live swarm's timeline (Vivaldi error falling while the tokens move), over the settled gain, the cooling of moves and region surveys",
		run:     runCooling,
	})
}

type coolingParams struct {
	common
	Latency string `json:"latency"`
	// Sizes are the networks the rows run on.
	Sizes []coolingSize `json:"sizes"`
	Notes []string      `json:"notes"`
}

// coolingSize is one network: n peers, S tokens, capacity C, placements
// seed … seed+Places−1 with Runs token seeds each, the coordinates of
// Stages, and the (SettledMinGain, CoolingMoves, RegionSurveys) to run.
type coolingSize struct {
	N      int            `json:"n"`
	S      int            `json:"s"`
	C      int            `json:"capacity"`
	Places int            `json:"placements"`
	Runs   int            `json:"runs_per_placement"`
	Stages []coolingStage `json:"stages"`
	Grid   []coolingKnobs `json:"grid"`
	// NewsLag holds back a share of the announcements
	// (sim.RepelOptions.NewsLag); zero in the experiment's own rows.
	NewsLag sim.NewsLag `json:"news_lag"`
	// SurveyInterval, if set, replaces the swarm configuration's
	// (repel.Config.SurveyInterval); unset in the experiment's own rows.
	SurveyInterval time.Duration `json:"survey_interval,omitempty"`
}

// coolingStage: from virtual time At (seconds after the tokens start) the
// peers move in the coordinates of Rounds Vivaldi rounds.
type coolingStage struct {
	At     float64 `json:"at_seconds"`
	Rounds int     `json:"vivaldi_rounds"`
}

type coolingKnobs struct {
	SettledMinGain float64 `json:"settled_min_gain"`
	CoolingMoves   int     `json:"cooling_moves"`
	RegionSurveys  bool    `json:"region_surveys"`
}

type coolingRow struct {
	N int `json:"n"`
	S int `json:"s"`
	coolingKnobs
	// Ratios are each run's mean client RTT over its greedy k-median's
	// (clients attached as the simulated selector attaches them),
	// Placement the same with the clients attached as the k-median's are,
	// Swap each run's k-median objective over the best single exchange's
	// (metrics.BestSwap: above 1, a region without a superpeer).
	Ratios    []float64 `json:"ratios"`
	Placement []float64 `json:"placement"`
	Swap      []float64 `json:"swap_gain"`
	// Settled is each run's convergence time (virtual seconds), Moves its
	// token moves.
	Settled []float64 `json:"settled_seconds"`
	// Surveyed is each run's time to every place also kept by its
	// surveys (sim.RepelResult.SurveyedSeconds): `peer swarm`'s converged.
	Surveyed []float64 `json:"surveyed_seconds"`
	Moves    []float64 `json:"moves"`
	Mean     float64   `json:"ratio_mean"`
	Worst    float64   `json:"ratio_max"`
	// Above is the share of runs whose ratio exceeds 1.10.
	Above float64 `json:"above_1_10"`
}

// liveStages490 follows `peer swarm --n 490 --method repel --superpeers 8
// --dilate 4`: its tokens start once the Vivaldi error passes 0.12 (the
// simulator's 50 rounds: 0.117) and the error is about 0.08 once they
// converge, 60-80 s later (200 rounds: 0.081). liveStages2000 the same at
// 2 000 peers, whose warm-up stops at about 0.10 (100 rounds) and ends
// near 0.08 (400).
var (
	liveStages490  = []coolingStage{{0, 50}, {15, 75}, {30, 100}, {45, 150}, {60, 200}}
	liveStages2000 = []coolingStage{{0, 100}, {20, 150}, {40, 200}, {60, 400}}
)

func runCooling(o Options, r *report.Run) error {
	grid := func(gains []float64, moves []int, region []bool) []coolingKnobs {
		var g []coolingKnobs
		for _, r := range region {
			for _, m := range moves {
				for _, x := range gains {
					g = append(g, coolingKnobs{x, m, r})
				}
			}
		}
		return g
	}
	both := []bool{false, true}
	p := coolingParams{common: commonOf(o), Latency: latency.Default,
		Sizes: []coolingSize{
			{N: 490, S: 8, Places: 5, Runs: 8, Stages: liveStages490, Grid: grid([]float64{0.2, 0.1, 0.05}, []int{2, 4}, both)},
			{N: 2000, S: 16, Places: 3, Runs: 1, Stages: liveStages2000, Grid: grid([]float64{0.2, 0.1}, []int{2, 4}, both)},
		},
		Notes: []string{
			"each run: sim.SimulateVivaldi to each stage's rounds (the placement's seed), then sim.SimulateRepel with swarm.RepelSwarmConfig(S, attract) but for the two knobs, starting in the first stage's coordinates and taking each later stage's at its time (RepelOptions.Later); attach as the live selector's (capacity C = 2⌈n/S⌉, displace superpeer.DefaultDisplace, probing every 15 s), a 3 s view, 500 ms ticks, scored after 4.5 s of quiet as `peer swarm` scores",
			"placements seed … seed+placements−1 (the placed PlanetLab space and the identities), token seeds 100·run + placement",
			"settled_min_gain: the relative gain a settled token needs to move; cooling_moves: every this many moves on a token's count the gain it needs doubles (repel.Config)",
			"region_surveys: repel.Config.RegionSurveys, every other survey of a settled holder asks the worst-served points of the other tokens' digests to measure the region",
			"swap_gain: the greedy k-median objective of the holders over that after metrics.BestSwap's best exchange (no capacity)",
		}}
	if o.Quick {
		p.Sizes = []coolingSize{{N: 490, S: 8, Places: 2, Runs: 1, Stages: liveStages490, Grid: grid([]float64{0.2, 0.1}, []int{2, 4}, both)}}
	}
	if o.tiny {
		p.Sizes = []coolingSize{{N: 120, S: 4, Places: 2, Runs: 1, Stages: []coolingStage{{0, 10}, {10, 60}}, Grid: grid([]float64{0.2, 0.05}, []int{2}, []bool{true})}}
	}
	runs := 0
	for i := range p.Sizes {
		p.Sizes[i].C = capacityFor(p.Sizes[i].N, p.Sizes[i].S)
		runs += p.Sizes[i].Places * p.Sizes[i].Runs * len(p.Sizes[i].Grid)
	}
	bar := report.NewProgress(o.Stderr, "runs", runs)
	done := 0
	var out []coolingRow
	for _, size := range p.Sizes {
		rows, err := coolingRows(o, p, size, func() { done++; bar.Set(done) })
		if err != nil {
			return err
		}
		out = append(out, rows...)
	}
	bar.Finish()
	t := report.NewTable("n", "S", "settled gain", "cooling moves", "region surveys", "runs", "/kmed mean", "/kmed worst", "above 1.10", "placement mean", "swap gain mean", "settled mean s", "moves mean")
	for _, row := range out {
		t.Add(row.N, row.S, row.SettledMinGain, row.CoolingMoves, row.RegionSurveys, len(row.Ratios), row.Mean, row.Worst, row.Above,
			metrics.Mean(row.Placement), metrics.Mean(row.Swap), metrics.Mean(row.Settled), metrics.Mean(row.Moves))
	}
	if err := printTable(o, r, "cooling", fmt.Sprintf("repel on a live swarm's timeline, over the settled gain and the cooling: %s placements from seed %d", p.Latency, o.Seed), t); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"rows": out})
}

// coolingRows runs one size's grid; done is called after every run.
func coolingRows(o Options, p coolingParams, size coolingSize, done func()) ([]coolingRow, error) {
	rows := make([]coolingRow, len(size.Grid))
	for k, g := range size.Grid {
		rows[k] = coolingRow{N: size.N, S: size.S, coolingKnobs: g}
	}
	for place := o.Seed; place < o.Seed+int64(size.Places); place++ {
		rtt, _, err := space(p.Latency, size.N, place)
		if err != nil {
			return nil, err
		}
		ids, _, err := sim.Identities(place, size.N, nil)
		if err != nil {
			return nil, err
		}
		idStrs := sim.IDStrings(ids)
		km := metrics.GreedyKMedian(rtt, size.S)
		kev, err := metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, km, size.C), km, size.C)
		if err != nil {
			return nil, err
		}
		var first *sim.VivaldiResult
		var later []sim.CoordStage
		for _, st := range size.Stages {
			vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: place, Rounds: st.Rounds})
			if err != nil {
				return nil, err
			}
			if first == nil {
				first = vr
				continue
			}
			later = append(later, sim.CoordStage{At: time.Duration(st.At * float64(time.Second)), Coords: vr.Coords})
		}
		for k, g := range size.Grid {
			cfg := swarm.RepelSwarmConfig(size.S, repel.Attract)
			cfg.SettledMinGain, cfg.CoolingMoves, cfg.RegionSurveys = g.SettledMinGain, g.CoolingMoves, g.RegionSurveys
			if size.SurveyInterval > 0 {
				cfg.SurveyInterval = size.SurveyInterval
			}
			choose := repel.DefaultAttachConfig()
			choose.ProbeEvery = 5 * 3 * time.Second // five renewals of the swarm's 9 s TTL
			for run := int64(1); run <= int64(size.Runs); run++ {
				rr, err := sim.SimulateRepel(sim.RepelOptions{RTT: rtt, Coords: slices.Clone(first.Coords), Later: later,
					Neighbors: first.Neighbors, IDs: idStrs, Config: cfg, Seed: 100*run + place,
					Attach: sim.AttachSelector, Capacity: size.C, Displace: superpeer.DefaultDisplace, Choose: choose,
					Quiet: 4500 * time.Millisecond, ViewEvery: 3 * time.Second, TickEvery: 500 * time.Millisecond, NewsLag: size.NewsLag})
				if err != nil {
					return nil, err
				}
				if len(rr.Superpeers) != size.S {
					return nil, fmt.Errorf("repel-cooling: placement %d, run %d: %d holders of %d tokens", place, run, len(rr.Superpeers), size.S)
				}
				ev, err := metrics.Evaluate(rtt, rr.Assignment, rr.Superpeers, size.C)
				if err != nil {
					return nil, err
				}
				pl, err := metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, rr.Superpeers, size.C), rr.Superpeers, size.C)
				if err != nil {
					return nil, err
				}
				sw := metrics.BestSwap(rtt, rr.Superpeers)
				row := &rows[k]
				row.Ratios = append(row.Ratios, ev.ClientRTT.Mean/kev.ClientRTT.Mean)
				row.Placement = append(row.Placement, pl.ClientRTT.Mean/kev.ClientRTT.Mean)
				row.Swap = append(row.Swap, sw.Before/sw.After)
				row.Settled = append(row.Settled, rr.SettledSeconds)
				row.Surveyed = append(row.Surveyed, rr.SurveyedSeconds)
				row.Moves = append(row.Moves, float64(rr.Events[repel.EventMovedAway.String()]))
				done()
			}
		}
	}
	for k := range rows {
		row := &rows[k]
		row.Mean, row.Worst = metrics.Mean(row.Ratios), slices.Max(row.Ratios)
		above := 0
		for _, x := range row.Ratios {
			if x > 1.10 {
				above++
			}
		}
		row.Above = float64(above) / float64(len(row.Ratios))
	}
	return rows, nil
}
