package exp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/internal/census"
)

func init() {
	register(Experiment{
		Name:    "growth",
		Summary: "a superpeer count that follows a fraction f of the network as it grows and shrinks (the census): S against f·n, re-selected peers per step of S, agreement time, messages (simulator, prefix; live mocknet swarms grown 100 → 2000 and shrunk to 500, prefix and repel, over time)",
		run:     runGrowth,
	})
}

type growthParams struct {
	common
	Fraction float64 `json:"fraction"`
	// Phases are the network sizes in turn, each reached over Ramp and
	// held for Hold (virtual time).
	Phases []int  `json:"phases"`
	Ramp   string `json:"ramp"`
	Hold   string `json:"hold"`
	Seeds  int    `json:"seeds"`
	// The live part: for each of LiveMethods a mocknet swarm over Latency
	// with max(LivePhases) peers, LivePhases[0] of them joined, driven
	// through LivePhases (swarm.Grow) with S following LiveFraction; each
	// phase's joins or kills in LiveBatches batches over LiveRamp (a batch
	// waits for the one before), the phase over
	// once the count is at rest and the selection converged, or after
	// LiveTimeout. One seed (the run's).
	LiveMethods      []string `json:"live_methods"`
	LiveFraction     float64  `json:"live_fraction"`
	LivePhases       []int    `json:"live_phases"`
	LiveRamp         string   `json:"live_ramp"`
	LiveBatches      int      `json:"live_batches"`
	LiveTimeout      string   `json:"live_timeout"`
	LiveTTL          string   `json:"live_ttl"`
	LiveVivaldiBound float64  `json:"live_vivaldi_bound"`
	// LiveDilate stretches the live token swarm's time by this factor
	// once its DHT has converged (swarm.Swarm.Dilate, as `peer swarm
	// --dilate`): link latencies and the protocols' timers that many times
	// longer, every figure in the network's time. 0 or 1: not dilated.
	LiveDilate float64 `json:"live_dilate,omitempty"`
	// LiveStallMs is the live token swarm's stall check
	// (swarm.VivaldiOptions.Stall, swarm.StallFor the dilation), ms of the
	// network's time; 0: off.
	LiveStallMs float64 `json:"live_stall_ms,omitempty"`
	// LiveConcurrent runs the methods' swarms at the same time (each on
	// its own peers) rather than one after the other.
	LiveConcurrent bool   `json:"live_concurrent"`
	Latency        string `json:"latency"`
	// RepelSim are the sizes the token method runs at in the simulator
	// (sim.SimulateRepel with repel.Config.Fraction), from a third of f·n
	// and from twice it, on coordinates of RepelVivaldiRounds rounds;
	// Rescheme those the prefix method's cores are handed S ± 1 at
	// (sim.PrefixRescheme).
	RepelSim           []int    `json:"repel_sim"`
	RepelVivaldiRounds int      `json:"repel_vivaldi_rounds"`
	Rescheme           []int    `json:"rescheme"`
	Notes              []string `json:"notes"`
}

// growthSteady is one (method, where, n) at the end of a phase: the
// entry of results.json's growth.steady.
type growthSteady struct {
	Method     string  `json:"method"`
	Where      string  `json:"where"`
	N          int     `json:"n"`
	Seed       int64   `json:"seed"`
	Fraction   float64 `json:"fraction"`
	Superpeers int     `json:"superpeers"`
	Target     float64 `json:"target"`
	Agreed     bool    `json:"agreed"`
	// ReselectedPerChange is the peers whose superpeer key changed per
	// unit step of S during the phase (0 when S did not change).
	ReselectedPerChange float64 `json:"reselected_per_change"`
	UnitSteps           int     `json:"unit_steps"`
	Proposals           int     `json:"proposals"`
	SpreadSeconds       float64 `json:"spread_seconds"`
	MessagesPerPeerSec  float64 `json:"messages_per_peer_second"`
	// Live only (swarm.GrowPhase): whether the phase came to rest and
	// converged before its timeout, and at rest at its end (every live
	// peer on S, f·n within the band); the peers re-attached in all; how
	// long the phase took and when it came to rest; the most time a peer
	// served before went without a superpeer in the phase, the longest a
	// joining peer waited for its first; peers unserved at its end.
	// ReselectedPerChange counts re-attached peers per unit step of S.
	Converged         *bool   `json:"converged,omitempty"`
	AtRest            bool    `json:"at_rest,omitempty"`
	Reattached        int     `json:"reattached,omitempty"`
	PhaseSeconds      float64 `json:"phase_seconds,omitempty"`
	RestSeconds       float64 `json:"rest_seconds,omitempty"`
	MaxWithoutSeconds float64 `json:"max_without_seconds,omitempty"`
	MaxFirstSeconds   float64 `json:"max_first_seconds,omitempty"`
	Unserved          int     `json:"unserved,omitempty"`
	// Events (live repel) are the token method's events in the phase:
	// minted, accepted (moves), fenced, retired, counted (proposals, also
	// in Proposals).
	Events map[string]uint64 `json:"events,omitempty"`
}

func runGrowth(o Options, r *report.Run) error {
	p := growthParams{common: commonOf(o), Fraction: 0.01, Seeds: 3,
		Phases: []int{100, 1000, 10_000, 100_000, 1_000_000, 100_000, 10_000, 1000},
		Ramp:   "1m", Hold: "4m",
		Notes: []string{
			"simulator (sim.PrefixGrowth): the prefix method's superpeers run the census of internal/census — the code the peers run — on virtual time; a superpeer per group of the exact code of the S it holds, reporting its members and key share, exchanging tables with a random other superpeer every 5 s; a new value reaches a group's clients at their next renewal (10 s) and the new groups' superpeers take their place then",
			"keys are seeded random 256-bit keys (not derived identities), so a million peers fit; peers join or leave in ten batches over each phase's ramp",
			"live (seed 1 only; `where: live`): per method a mocknet swarm over PlanetLab, peers placed on its hosts (--quick: the two methods' swarms side by side, sharing the machine; the full run one after the other), built with the largest phase's peers and all but the first phase's held back; held peers join through a random live peer (swarm.JoinLate: DHT join, then their Vivaldi service and selector start), peers leave by being killed at random (a crash: selector, node, host, links); each phase's joins or kills in batches over the ramp (a batch waits for the one before: at most 64 joins at once), then the phase runs until every live peer holds one S, f·n is within the census band around it and the method's selection has converged (swarm.PrefixState / RepelState), on two samples in a row, or until its timeout (reported as not converged)",
			"live methods as `peer swarm --method M --fraction F` runs them (swarm.MethodParams): prefix with superpeer.WithFraction (capacity 2⌈1/f⌉, attachment TTL 9 s, no Vivaldi; first lookups, and those of clients refused by a superpeer that is no longer theirs, spread over 20 ms a peer of the largest batch of joins or kills, 2 s in the full run, rather than StartPrefix's 20 ms for every peer of the swarm, 40 s at 2000: a refused client waits up to the spread, and with 40 s one full run on a shared machine ended its 500 → 1000 phase with 800 of 1000 peers unserved and S falling from 11 to 4 — the census counts only the served); repel with repel.Config.Fraction on swarm.RepelSwarmConfig (attract, surveys, piggybacked announcements, capacity 2⌈1/f⌉), Vivaldi warmed up on the first phase's peers until the median error is under the bound, then every peer sampling every 2 s, a joiner at the warm-up interval for its first 40 samples; S starts at round(f·n) of the first phase",
			"live samples every 2 s: S is the count most live peers hold (s_min/s_max the range); unserved = live peers neither superpeers nor attached to a live superpeer that lists them (newcomers before their first attach included); re-attached = peers served by another superpeer than at their last served sample (a promotion or demotion included), per unit step of S in the phase as reselected_per_change (joins, kills and, with repel, every token move re-attach peers too, so it is not the count's alone); time without a superpeer = per peer served before, the sum of the periods of the samples that found it unserved (2 s resolution), the most of any peer; messages = what the live peers sent between samples per live peer per second: kad-dht and raw closest-peer requests, attach requests, Vivaldi exchanges (which carry repel's piggybacks and probes), repel's own frames; the prefix census's table exchanges ride on closest-peer lookups counted as DHT traffic",
			"repel in the simulator (sim.SimulateRepel, every peer's repel.Node with repel.Config.Fraction, the census inside the model, on repel.DefaultConfig with MaxCandidates 64): the PlanetLab matrix placed for n peers, coordinates after repel_vivaldi_rounds rounds of sim.SimulateVivaldi held fixed, clients attaching as the selector does (capacity 2⌈1/f⌉); the network keeps its size (the simulator's peers are a fixed set) and the count starts from a third of f·n and from twice it; a run ends once the running nodes agree on a count the census keeps for n and every token is settled and surveyed with no move for 2 min; /kmed is the mean client RTT over a greedy k-median's of that count (sampled candidates past 2000 peers)",
			"prefix re-scheme (sim.PrefixRescheme): every peer's superpeer.PrefixCore (the live selector's logic) converged under the exact code of S = round(f·n), then handed the code of S ± 1 as the census does (PrefixCore.SetScheme), run 3 min more: the peers of the groups that differ between the codes, those that asked a superpeer to take them anew, and those whose superpeer changed",
		}}
	p.LiveMethods, p.LiveFraction, p.Latency, p.LiveTTL, p.LiveVivaldiBound = []string{"prefix", "repel"}, 0.01, latency.Default, "9s", 0.12
	p.LivePhases, p.LiveRamp, p.LiveBatches, p.LiveTimeout = []int{100, 500, 1000, 2000, 1000, 500}, "1m", 10, "5m"
	p.RepelSim, p.RepelVivaldiRounds, p.Rescheme = []int{100, 1000, 10_000}, 300, []int{1000, 10_000, 100_000}
	if o.Quick {
		p.Phases, p.Seeds = []int{100, 1000, 10_000, 1000}, 1
		p.RepelSim, p.Rescheme = []int{100, 1000}, []int{1000, 10_000}
		// Two 400-peer swarms leave most of two cores idle: side by side
		// they fit the quick run's few minutes.
		p.LivePhases, p.LiveRamp, p.LiveBatches, p.LiveTimeout, p.LiveConcurrent = []int{100, 400}, "10s", 5, "150s", true
	}
	if o.tiny {
		p.Phases, p.Seeds, p.Ramp, p.Hold = []int{100, 1000, 300}, 1, "30s", "2m"
		p.LiveMethods, p.LivePhases = nil, nil // the live driver has its own test (experiments/swarm)
		p.RepelSim, p.RepelVivaldiRounds, p.Rescheme = []int{150}, 60, []int{500}
	}
	if o.Method != "" && o.Method != "prefix" {
		p.Seeds, p.Rescheme = 0, nil
	}
	if o.Method != "" && o.Method != "repel" {
		p.RepelSim = nil
	}
	if o.Method != "" {
		p.LiveMethods = slices.DeleteFunc(p.LiveMethods, func(m string) bool { return m != o.Method })
	}
	if len(o.Phases) > 0 {
		p.Phases, p.LivePhases = o.Phases, o.Phases
	}
	if o.Dilate > 1 {
		if o.Method != "repel" || o.Where != "live" {
			return fmt.Errorf("growth: a dilation of %g is for the live token swarm alone (--method repel --where live): the prefix selector's timers do not follow it, and the simulator has no machine to outpace", o.Dilate)
		}
		p.LiveDilate = o.Dilate
		p.LiveStallMs = float64(swarm.StallFor(o.Dilate)) / float64(time.Millisecond)
	}
	switch o.Where {
	case "live":
		p.Seeds, p.Rescheme, p.RepelSim = 0, nil, nil
	case "sim":
		p.LiveMethods = nil
	}
	ramp, _ := time.ParseDuration(p.Ramp)
	hold, _ := time.ParseDuration(p.Hold)
	var rows []growthSteady
	bar := report.NewProgress(o.Stderr, "runs", p.Seeds)
	t := report.NewTable("method", "where", "seed", "n", "f·n", "S", "agreed", "proposals", "unit steps", "re-selected per step", "n/S", "spread s", "msgs/peer/s")
	series := map[int64]*report.Series{}
	for k := 0; k < p.Seeds; k++ {
		seed := o.Seed + int64(k)
		g := sim.GrowthOptions{Seed: seed, Census: census.Config{Fraction: p.Fraction}}
		for _, n := range p.Phases {
			g.Phases = append(g.Phases, sim.GrowthPhase{N: n, Ramp: ramp, Hold: hold})
		}
		res, err := sim.PrefixGrowth(g)
		if err != nil {
			return err
		}
		if res.MinSuperpeers < 1 {
			return fmt.Errorf("growth: seed %d: S fell to %d", seed, res.MinSuperpeers)
		}
		s := &report.Series{Name: fmt.Sprintf("seed %d", seed), Points: true}
		series[seed] = s
		for _, pt := range res.Points {
			row := growthSteady{Method: "prefix", Where: "sim", N: pt.N, Seed: seed, Fraction: p.Fraction, Superpeers: pt.Superpeers,
				Target: pt.Target, Agreed: pt.Agreed, ReselectedPerChange: pt.PerUnitStep, UnitSteps: pt.UnitSteps,
				Proposals: pt.Changes, SpreadSeconds: pt.SpreadSeconds, MessagesPerPeerSec: pt.MessagesPerPeerSecond}
			rows = append(rows, row)
			t.Add(row.Method, row.Where, seed, row.N, row.Target, row.Superpeers, row.Agreed, row.Proposals, row.UnitSteps,
				row.ReselectedPerChange, float64(row.N)/float64(max(row.Superpeers, 1)), row.SpreadSeconds, row.MessagesPerPeerSec)
			s.X = append(s.X, row.Target)
			s.Y = append(s.Y, float64(row.Superpeers))
		}
		bar.Set(k + 1)
	}
	bar.Finish()
	if err := printTable(o, r, "growth", fmt.Sprintf("superpeers following f = %g of the network, at the end of each phase (%s ramp, %s hold)", p.Fraction, p.Ramp, p.Hold), t); err != nil {
		return err
	}
	rrows, rt, err := repelGrowthSim(o, p.Fraction, p.RepelSim, o.Seed, p.RepelVivaldiRounds)
	if err != nil {
		return err
	}
	for _, row := range rrows {
		rows = append(rows, row.growthSteady)
	}
	if err := printTable(o, r, "growth-repel-sim", fmt.Sprintf("the token method in the simulator, S following f = %g from a third of f·n and from twice it", p.Fraction), rt); err != nil {
		return err
	}
	resch, xt, err := prefixRescheme(p.Fraction, p.Rescheme, o.Seed)
	if err != nil {
		return err
	}
	if err := printTable(o, r, "growth-rescheme", "prefix: every peer's PrefixCore handed the code of S ± 1 (S = f·n)", xt); err != nil {
		return err
	}
	live := map[string]*swarm.Growth{}
	errs := make([]error, len(p.LiveMethods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, method := range p.LiveMethods {
		run := func() {
			g, err := growthLive(o, p, method)
			if err != nil {
				errs[k] = fmt.Errorf("growth: live %s: %w", method, err)
				return
			}
			mu.Lock()
			live[method] = g
			mu.Unlock()
		}
		if p.LiveConcurrent {
			wg.Go(run)
		} else {
			run()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(live) > 0 {
		lr, err := growthLiveRows(o, r, p, live)
		if err != nil {
			return err
		}
		rows = append(rows, lr...)
	}
	var ss []report.Series
	lo, hi := 1.0, 1.0
	for k := 0; k < p.Seeds; k++ {
		s := series[o.Seed+int64(k)]
		for _, x := range s.X {
			hi = max(hi, x)
		}
		ss = append(ss, *s)
	}
	title := fmt.Sprintf("prefix: agreed S against f·n (f = %g, simulator)", p.Fraction)
	for _, method := range p.LiveMethods {
		ls := report.Series{Name: "live " + method, Points: true}
		for _, row := range rows {
			if row.Where == "live" && row.Method == method {
				ls.X, ls.Y = append(ls.X, row.Target), append(ls.Y, float64(row.Superpeers))
				hi = max(hi, row.Target)
			}
		}
		ss = append(ss, ls)
		title = fmt.Sprintf("agreed S against f·n at each phase's end (simulator: prefix, f = %g; live: f = %g)", p.Fraction, p.LiveFraction)
	}
	if len(rrows) > 0 {
		rs := report.Series{Name: "repel, simulator", Points: true}
		for _, row := range rrows {
			rs.X, rs.Y = append(rs.X, row.Target), append(rs.Y, float64(max(row.Superpeers, 1)))
			hi = max(hi, row.Target)
		}
		ss = append(ss, rs)
		title = fmt.Sprintf("agreed S against f·n (f = %g; the series name the runs)", p.Fraction)
	}
	// A log axis needs a range: only the 100-peer rows (f·n = 1) give none.
	hi = max(hi, 10*lo)
	ss = append(ss, report.Series{Name: "S = f·n", X: []float64{lo, hi}, Y: []float64{lo, hi}})
	if err := r.Lines("superpeers-vs-target", report.Figure{Title: title, X: "f·n", Y: "superpeers S", LogX: true, LogY: true, Legend: "top-left"}, ss); err != nil {
		return err
	}
	res := map[string]any{"steady": rows, "repel_sim": rrows, "rescheme": resch}
	if len(live) > 0 {
		res["live"] = live
	}
	return r.WriteResults(p, map[string]any{"growth": res})
}
