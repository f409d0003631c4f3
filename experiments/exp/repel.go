package exp

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "repel",
		Summary: "simulator, PlanetLab: repel (attract, repulsion) vs prefix, random and greedy k-median — client RTT, spread, load under capacity, settle time, traffic",
		run:     runRepel,
	})
}

// The goal of the token method (issue 5): mean client RTT at most
// goalKMedian × the greedy k-median's and at most goalRandom × random
// selection's, with every client served and no superpeer over capacity.
const (
	goalKMedian = 1.15
	goalRandom  = 0.6
)

// Method names of the repel experiment's rows.
const (
	mAttract   = "repel-attract"
	mRepulsion = "repel-repulsion"
	mPrefix    = "prefix"
	mRandom    = "random"
	mKMedian   = "greedy k-median"
)

type repelParams struct {
	common
	Latency       string `json:"latency"`
	Ns            []int  `json:"ns"`
	Ss            []int  `json:"ss"`
	VivaldiRounds int    `json:"vivaldi_rounds"`
	// RandomDraws random selections are averaged into the random row.
	RandomDraws int `json:"random_draws"`
	// Attract and Repulsion are the token method's configurations (Tokens
	// set to S in each run).
	Attract   repel.Config `json:"attract"`
	Repulsion repel.Config `json:"repulsion"`
	// The simulator's attach (sim.AttachSelector, as the live selector)
	// and the clients' choice (durations in ns).
	Attach     string             `json:"attach"`
	Choose     repel.AttachConfig `json:"choose"`
	Displace   string             `json:"displace"`
	ViewEvery  string             `json:"view_every"`
	Limit      string             `json:"limit"`
	GoalKMed   float64            `json:"goal_kmedian_ratio"`
	GoalRandom float64            `json:"goal_random_ratio"`
	Notes      []string           `json:"notes"`
}

// repelRow is one method on one (n, S). Figures of the random row are means
// over the draws.
type repelRow struct {
	N        int    `json:"n"`
	S        int    `json:"s"`
	Capacity int    `json:"capacity"`
	Method   string `json:"method"`
	Draws    int    `json:"draws,omitempty"`

	Superpeers   float64 `json:"superpeers"`
	RTTMean      float64 `json:"rtt_mean"`
	RTTP50       float64 `json:"rtt_p50"`
	RTTP90       float64 `json:"rtt_p90"`
	RatioKMedian float64 `json:"ratio_kmedian"`
	RatioRandom  float64 `json:"ratio_random"`
	NearestMean  float64 `json:"nearest_mean"`
	NearestCV    float64 `json:"nearest_cv"`
	PairMin      float64 `json:"pair_min"`
	LoadMax      float64 `json:"load_max"`
	LoadMean     float64 `json:"load_mean"`
	Gini         float64 `json:"gini"`
	OverCapacity float64 `json:"over_capacity"`
	Unserved     float64 `json:"unserved"`
	// GoalMet is set on the repel-attract rows only.
	GoalMet *bool `json:"goal_met,omitempty"`

	// The token method's run (repel rows only).
	Repel *repelRunFigures `json:"repel,omitempty"`
	// Eval is the full evaluation (every row but random's).
	Eval *metrics.Evaluation `json:"evaluation,omitempty"`
}

type repelRunFigures struct {
	Settled        bool    `json:"settled"`
	SettleSeconds  float64 `json:"settle_virtual_seconds"`
	VirtualSeconds float64 `json:"virtual_seconds"`
	Moves          int     `json:"moves"`
	// Per peer per second over the whole run, and over the settled stretch
	// at its end (see sim.RepelTraffic for what is counted).
	MsgsPerPeerSec         float64          `json:"msgs_per_peer_s"`
	BytesPerPeerSec        float64          `json:"bytes_per_peer_s"`
	SettledMsgsPerPeerSec  float64          `json:"settled_msgs_per_peer_s"`
	SettledBytesPerPeerSec float64          `json:"settled_bytes_per_peer_s"`
	WallSeconds            float64          `json:"wall_seconds"`
	VivaldiMedian          float64          `json:"vivaldi_median_error"`
	VivaldiP90             float64          `json:"vivaldi_p90_error"`
	Traffic                sim.RepelTraffic `json:"traffic"`
	// Probes are the holders' RTT measurements (of other holders and of
	// their clients: repel.Config.ProbeTTL), per peer per second over the
	// run; one Vivaldi exchange each live, not in Traffic.
	Probes           int             `json:"holder_probes"`
	ProbesPerPeerSec float64         `json:"holder_probes_per_peer_s"`
	Attach           sim.AttachStats `json:"attach"`
	Events           map[string]int  `json:"events"`
	MessagesByType   map[string]int  `json:"messages_by_type"`
}

func rowOf(n, S, C int, method string, ev metrics.Evaluation) repelRow {
	return repelRow{
		N: n, S: S, Capacity: C, Method: method,
		Superpeers: float64(ev.Count.Superpeers),
		RTTMean:    ev.ClientRTT.Mean, RTTP50: ev.ClientRTT.P50, RTTP90: ev.ClientRTT.P90,
		RatioKMedian: math.NaN(), RatioRandom: math.NaN(),
		NearestMean: ev.Spread.NearestMean, NearestCV: ev.Spread.NearestCV, PairMin: ev.Spread.PairMin,
		LoadMax: float64(ev.Load.Max), LoadMean: ev.Load.Mean, Gini: ev.Load.Gini,
		OverCapacity: float64(ev.Load.OverCapacity), Unserved: float64(ev.Unserved),
		Eval: &ev,
	}
}

// meanRow averages rows field by field (the random draws).
func meanRow(rows []repelRow) repelRow {
	out := rows[0]
	out.Eval, out.Draws = nil, len(rows)
	k := float64(len(rows))
	fields := func(r *repelRow) []*float64 {
		return []*float64{&r.Superpeers, &r.RTTMean, &r.RTTP50, &r.RTTP90, &r.NearestMean, &r.NearestCV, &r.PairMin,
			&r.LoadMax, &r.LoadMean, &r.Gini, &r.OverCapacity, &r.Unserved}
	}
	dst := fields(&out)
	for _, p := range dst {
		*p = 0
	}
	for i := range rows {
		for j, p := range fields(&rows[i]) {
			*dst[j] += *p / k
		}
	}
	return out
}

// repelGoal scores a mean client RTT against the greedy k-median's and
// random selection's: the two ratios, and whether the goal is met (both
// ratios within bounds, every client served, no superpeer over capacity).
func repelGoal(rttMean, kmedMean, randomMean, overCapacity, unserved float64) (rk, rr float64, met bool) {
	rk, rr = rttMean/kmedMean, rttMean/randomMean
	const eps = 1e-9
	met = rk <= goalKMedian+eps && rr <= goalRandom+eps && overCapacity == 0 && unserved == 0
	return rk, rr, met
}

// scoreRepelRows fills the ratio columns of every row of one (n, S), and
// the goal of the repel-attract rows, from its k-median and random rows.
func scoreRepelRows(rows []repelRow) error {
	var km, rnd *repelRow
	for i := range rows {
		switch rows[i].Method {
		case mKMedian:
			km = &rows[i]
		case mRandom:
			rnd = &rows[i]
		}
	}
	if km == nil || rnd == nil {
		return fmt.Errorf("exp: repel: no %s or %s row", mKMedian, mRandom)
	}
	kmMean, rndMean := km.RTTMean, rnd.RTTMean
	for i := range rows {
		r := &rows[i]
		rk, rr, met := repelGoal(r.RTTMean, kmMean, rndMean, r.OverCapacity, r.Unserved)
		r.RatioKMedian, r.RatioRandom = rk, rr
		if r.Method == mAttract {
			r.GoalMet = &met
		}
	}
	return nil
}

func runRepel(o Options, r *report.Run) error {
	p := repelParams{
		common: commonOf(o), Latency: latency.Default, VivaldiRounds: 1000, RandomDraws: 20,
		Attract: repelConfig(0), Repulsion: repelConfig(0),
		Attach: sim.AttachSelector.String(), Choose: sim.RepelChoice(),
		ViewEvery: "15s", Limit: "30m", GoalKMed: goalKMedian, GoalRandom: goalRandom,
		Displace: superpeer.DefaultDisplace.String(),
	}
	if o.ExploreFirst > 0 {
		p.Choose.ExploreFirst = o.ExploreFirst
	}
	p.Repulsion.Model = repel.Repulsion
	// Lo et al.'s rule as they give it: no surveys (a survey would move
	// each token to the measured middle of its clients, whatever the force).
	p.Repulsion.SurveyInterval = 0
	switch {
	case o.tiny:
		p.Ns, p.Ss, p.VivaldiRounds, p.RandomDraws = []int{120}, []int{4}, 60, 5
	case o.Quick:
		p.Ns, p.Ss = []int{490}, []int{8, 16}
	default:
		p.Ns, p.Ss = []int{490, 2000}, []int{8, 16, 32}
	}
	p.Notes = []string{
		"latency: the PlanetLab matrix placed for n peers (latency.Place; n = 490 is one peer per host); RTTs in ms are the matrix's, true RTTs",
		"capacity C = 2⌈n/S⌉ for every method; random and greedy k-median: each client with its truly nearest superpeer that has room (metrics.AssignWithCapacity); prefix: sim.Prefix with exactly S groups, overflow to the nearest groups by key",
		"repel: sim.SimulateRepel over the coordinates of sim.SimulateVivaldi after vivaldi_rounds rounds (one exchange per peer per round: 1000 rounds are about 2.8 h of the live service at its default 10 s interval; the simulator's near neighbours are the truly nearest of 128 candidates), held fixed; repel.DefaultConfig with MaxCandidates 64 and Config.Capacity = C, as the live selector sets it from its attach options (Attract then weighs positions by a capacitated assignment)",
		"repel attach: sim.AttachSelector, the live selector's: every 15 s each client, in a seeded order, runs its repel.Chooser (choose; ProbeEvery five renewals): it measures holders (the true RTT) until the first Probe of its ranking (measured RTT where known, predicted otherwise) are measured, keeps its holder while within Switch of the first, else asks holders in ranking order and takes the first with room (a holder refuses a new client at C unless displace lets it take the new one in place of a served client: the client says its regret with each request, repel.Regret, its next choice's RTT minus this one's, and a full holder takes a newcomer whose regret exceeds the least of its clients' by more than displace, in microseconds as on the wire: each holder keeps a superpeer.AttachTable, the live attach server's own; the displaced client chooses again at once)",
		"greedy k-median: metrics.GreedyKMedian over the true matrix (all peers candidates), the first S of one greedy run at the largest S",
		"random: the mean of random_draws seeded selections, field by field; the CDF pools the draws",
		"ratio_kmedian, ratio_random: the row's mean client RTT over the greedy k-median's and random's; goal_met (repel-attract): ratio_kmedian ≤ 1.15, ratio_random ≤ 0.6, no superpeer over C, no client unserved",
		"settle: virtual seconds until every token was last held once and settled with no move since; moves: accepted token moves",
		"traffic: token protocol only (announcements with their GossipSub envelope, one copy to each other peer; move frames), per peer per second over the run (and, in results.json, over the settled stretch); attach and Vivaldi not counted",
		"holder_probes (results.json): the RTT measurements the token method asks for: holders' of other holders and of their attached clients (repel.Config.ProbeTTL: SiteRTT and the digests' measured RTTs) and survey candidates' of the peers a survey lists, answered with the true RTT; one Vivaldi exchange each in the live selector, not in traffic (surveys and their reports are)",
		"surveys (attract only; repel.Config.SurveyInterval): once settled, a holder asks the SurveyCandidates clients the coordinates rank best as the middle of its clients to measure their RTTs to it and to SurveyClients of its clients, and hands its token to one whose sum is lower by SurveyGain (see attract); the run ends once every holder's place was kept by a survey",
	}
	maxS := 0
	for _, S := range p.Ss {
		maxS = max(maxS, S)
	}
	t := report.NewTable("n", "S", "C", "method", "rtt mean", "p90", "/kmed", "/random", "nearest mean", "nearest cv", "pair min",
		"load max", "load mean", "gini", "over C", "settle s", "moves", "msgs/peer/s", "B/peer/s", "goal met")
	var rows []repelRow
	for _, n := range p.Ns {
		rtt, _, err := space(p.Latency, n, o.Seed)
		if err != nil {
			return err
		}
		ids, keys, err := sim.Identities(o.Seed, n, nil)
		if err != nil {
			return err
		}
		idStrs := sim.IDStrings(ids)
		fmt.Fprintf(o.Stderr, "n = %d: greedy k-median over the true matrix...\n", n)
		kmAll := metrics.GreedyKMedian(rtt, maxS)
		bar := report.NewProgress(o.Stderr, fmt.Sprintf("vivaldi n = %d", n), p.VivaldiRounds)
		vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: o.Seed, Rounds: p.VivaldiRounds, Progress: func(d, _ int) { bar.Set(d) }})
		bar.Finish()
		if err != nil {
			return err
		}
		last := vr.Checkpoints[len(vr.Checkpoints)-1]
		for _, S := range p.Ss {
			C := capacityFor(n, S)
			var group []repelRow
			var samples []report.Sample
			evaluate := func(method string, a metrics.Assignment, sps []int) (repelRow, error) {
				ev, err := metrics.Evaluate(rtt, a, sps, C)
				if err != nil {
					return repelRow{}, err
				}
				ev.SetTarget(S)
				return rowOf(n, S, C, method, ev), nil
			}
			// The token method, both models.
			for _, m := range []struct {
				name string
				cfg  repel.Config
			}{{mAttract, p.Attract}, {mRepulsion, p.Repulsion}} {
				cfg := m.cfg
				cfg.Tokens = S
				rbar := report.NewProgress(o.Stderr, fmt.Sprintf("%s n = %d S = %d (virtual s)", m.name, n, S), 1800)
				start := time.Now()
				rr, err := sim.SimulateRepel(sim.RepelOptions{
					RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: idStrs, Config: cfg, Seed: o.Seed,
					Attach: sim.AttachSelector, Capacity: C, Choose: p.Choose, Displace: superpeer.DefaultDisplace,
					Progress: func(now, _ time.Duration) { rbar.Set(int(now.Seconds())) },
				})
				rbar.Finish()
				if err != nil {
					return err
				}
				row, err := evaluate(m.name, rr.Assignment, rr.Superpeers)
				if err != nil {
					return err
				}
				msgs, bytes, smsgs, sbytes := rr.Traffic.PerPeer(n, rr.VirtualSeconds)
				row.Repel = &repelRunFigures{
					Settled: rr.Settled, SettleSeconds: rr.SettledSeconds, VirtualSeconds: rr.VirtualSeconds,
					Moves:          rr.Events[repel.EventAccepted.String()],
					MsgsPerPeerSec: msgs, BytesPerPeerSec: bytes, SettledMsgsPerPeerSec: smsgs, SettledBytesPerPeerSec: sbytes,
					WallSeconds:   time.Since(start).Seconds(),
					VivaldiMedian: last.Median, VivaldiP90: last.P90,
					Traffic: rr.Traffic, Attach: rr.Attach, Events: rr.Events, MessagesByType: rr.Messages,
					Probes: rr.Probes,
				}
				if rr.VirtualSeconds > 0 {
					row.Repel.ProbesPerPeerSec = float64(rr.Probes) / float64(n) / rr.VirtualSeconds
				}
				group = append(group, row)
				samples = append(samples, report.Sample{Name: m.name, Values: clientRTTs(rtt, rr.Assignment)})
			}
			// prefix
			scheme, err := superpeer.Exact(S)
			if err != nil {
				return err
			}
			pr := sim.Prefix(keys, scheme, C)
			row, err := evaluate(mPrefix, pr.Assignment, pr.Superpeers)
			if err != nil {
				return err
			}
			group = append(group, row)
			samples = append(samples, report.Sample{Name: mPrefix, Values: clientRTTs(rtt, pr.Assignment)})
			// random, averaged over draws
			rng := rand.New(rand.NewSource(o.Seed*1_000_003 + int64(n)*101 + int64(S)))
			var draws []repelRow
			var pooled []float64
			for d := 0; d < p.RandomDraws; d++ {
				rs := metrics.RandomSuperpeers(n, S, rng)
				ra := metrics.AssignWithCapacity(rtt, rs, C)
				row, err := evaluate(mRandom, ra, rs)
				if err != nil {
					return err
				}
				draws = append(draws, row)
				pooled = append(pooled, clientRTTs(rtt, ra)...)
			}
			group = append(group, meanRow(draws))
			samples = append(samples, report.Sample{Name: fmt.Sprintf("%s (%d draws)", mRandom, p.RandomDraws), Values: pooled})
			// greedy k-median
			km := append([]int(nil), kmAll[:S]...)
			ka := metrics.AssignWithCapacity(rtt, km, C)
			row, err = evaluate(mKMedian, ka, km)
			if err != nil {
				return err
			}
			group = append(group, row)
			samples = append(samples, report.Sample{Name: mKMedian, Values: clientRTTs(rtt, ka)})

			if err := scoreRepelRows(group); err != nil {
				return err
			}
			for _, g := range group {
				addRepelRow(t, g)
			}
			rows = append(rows, group...)
			if err := r.CDF(fmt.Sprintf("client-rtt-n%d-s%d", n, S), report.Figure{
				Title: fmt.Sprintf("client→superpeer RTT, PlanetLab, n = %d, S = %d, C = %d", n, S, C),
				X:     "RTT (ms)", Y: "fraction of clients", LogX: true,
			}, samples); err != nil {
				return err
			}
		}
	}
	if err := printTable(o, r, "repel", "repel vs baselines on PlanetLab (RTT in ms, true; capacity C = 2⌈n/S⌉ for all)", t); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"rows": rows})
}

func addRepelRow(t *report.Table, g repelRow) {
	settle, moves, msgs, bytes, goal := any(""), any(""), any(""), any(""), any("")
	if g.Repel != nil {
		settle, moves, msgs, bytes = "unsettled", g.Repel.Moves, g.Repel.MsgsPerPeerSec, g.Repel.BytesPerPeerSec
		if g.Repel.Settled {
			settle = g.Repel.SettleSeconds
		}
	}
	if g.GoalMet != nil {
		goal = "no"
		if *g.GoalMet {
			goal = "yes"
		}
	}
	t.Add(g.N, g.S, g.Capacity, g.Method, g.RTTMean, g.RTTP90, g.RatioKMedian, g.RatioRandom, g.NearestMean, g.NearestCV, g.PairMin,
		whole(g.LoadMax), g.LoadMean, g.Gini, whole(g.OverCapacity), settle, moves, msgs, bytes, goal)
}

// whole prints a count as an integer unless it is a mean over draws.
func whole(x float64) any {
	if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int64(x)
	}
	return x
}
