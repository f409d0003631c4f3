package exp

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// repelGrowthRow is one simulated token run under a fraction: the count
// it started from and where the census took it.
type repelGrowthRow struct {
	growthSteady
	From          int     `json:"from"`
	Minted        int     `json:"minted"`
	Retired       int     `json:"retired"`
	Settled       bool    `json:"settled"`
	SettleSeconds float64 `json:"settle_seconds"`
	// RatioKMedian is the mean client RTT over a greedy k-median's of the
	// same count (true RTTs, same capacity).
	RatioKMedian float64 `json:"ratio_kmedian"`
	WallSeconds  float64 `json:"wall_seconds"`
}

// repelGrowthSim runs the token method in the simulator (sim.SimulateRepel
// with repel.Config.Fraction f, the nodes' own census) on the PlanetLab
// matrix placed for each n, started from a third of f·n and from twice it,
// and reports where the count settled. The network does not change size
// during a run: the simulator's peers are a fixed set; the count moves from
// its start to f·n, minting or retiring tokens.
func repelGrowthSim(o Options, f float64, ns []int, seed int64, rounds int) ([]repelGrowthRow, *report.Table, error) {
	t := report.NewTable("n", "f·n", "from", "S", "agreed", "proposals", "minted", "retired", "settle s", "/kmed", "msgs/peer/s", "wall s")
	var rows []repelGrowthRow
	for _, n := range ns {
		rtt, _, err := space(latency.Default, n, seed)
		if err != nil {
			return nil, nil, err
		}
		ids, _, err := sim.Identities(seed, n, nil)
		if err != nil {
			return nil, nil, err
		}
		idStrs := sim.IDStrings(ids)
		bar := report.NewProgress(o.Stderr, fmt.Sprintf("vivaldi n = %d", n), rounds)
		vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: seed, Rounds: rounds, Progress: func(d, _ int) { bar.Set(d) }})
		bar.Finish()
		if err != nil {
			return nil, nil, err
		}
		target := f * float64(n)
		C := 2 * int(math.Ceil(1/f))
		for _, from := range []int{max(1, int(math.Round(target/3))), max(2, int(math.Round(2*target)))} {
			cfg := repelConfig(from)
			cfg.Fraction = f
			cfg.MaxTokens = min(n, 4*max(1, int(math.Ceil(target))))
			start := time.Now()
			rbar := report.NewProgress(o.Stderr, fmt.Sprintf("repel n = %d from %d (virtual s)", n, from), 7200)
			rr, err := sim.SimulateRepel(sim.RepelOptions{
				RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: idStrs, Config: cfg, Seed: seed,
				Attach: sim.AttachSelector, Capacity: C, Choose: sim.RepelChoice(), Displace: superpeer.DefaultDisplace,
				Limit:    2 * time.Hour,
				Progress: func(now, _ time.Duration) { rbar.Set(int(now.Seconds())) },
			})
			rbar.Finish()
			if err != nil {
				return nil, nil, err
			}
			row := repelGrowthRow{
				growthSteady: growthSteady{Method: "repel", Where: "sim", N: n, Seed: seed, Fraction: f, Superpeers: rr.Count,
					Target: target, Agreed: rr.Count > 0, Proposals: rr.Events[repel.EventCounted.String()]},
				From: from, Minted: rr.Events[repel.EventMinted.String()], Retired: rr.Events[repel.EventRetired.String()],
				Settled: rr.Settled, SettleSeconds: rr.SettledSeconds, WallSeconds: time.Since(start).Seconds(),
			}
			row.UnitSteps = max(rr.Count-from, from-rr.Count)
			row.MessagesPerPeerSec, _, _, _ = rr.Traffic.PerPeer(n, rr.VirtualSeconds)
			if rr.Count > 0 && len(rr.Superpeers) == rr.Count {
				// Over at most 1000 seeded candidates past 2000 peers: the
				// full greedy is S·n² distance reads.
				km := metrics.GreedyKMedian(rtt, rr.Count)
				if n > 2000 {
					km = metrics.GreedyKMedianSampled(rtt, rr.Count, 1000, rand.New(rand.NewSource(seed)))
				}
				kev, err := metrics.Evaluate(rtt, metrics.AssignWithCapacity(rtt, km, C), km, C)
				if err != nil {
					return nil, nil, err
				}
				ev, err := metrics.Evaluate(rtt, rr.Assignment, rr.Superpeers, C)
				if err != nil {
					return nil, nil, err
				}
				row.RatioKMedian = ev.ClientRTT.Mean / kev.ClientRTT.Mean
			}
			rows = append(rows, row)
			t.Add(n, target, from, row.Superpeers, row.Agreed, row.Proposals, row.Minted, row.Retired,
				row.SettleSeconds, row.RatioKMedian, row.MessagesPerPeerSec, row.WallSeconds)
		}
	}
	return rows, t, nil
}

// reschemeRow is one change of S by one given to a converged simulated
// prefix network's cores (sim.PrefixRescheme).
type reschemeRow struct {
	N        int `json:"n"`
	From     int `json:"from"`
	To       int `json:"to"`
	Members  int `json:"changed_group_members"`
	Attached int `json:"attached_anew"`
	Moved    int `json:"moved"`
}

// prefixRescheme runs sim.PrefixRescheme — every peer's PrefixCore, the
// live selector's logic — for S → S+1 and back at S = f·n for each n, on
// seeded random keys: who re-attaches when the census changes the code.
func prefixRescheme(f float64, ns []int, seed int64) ([]reschemeRow, *report.Table, error) {
	t := report.NewTable("n", "S from", "S to", "changed groups' members", "attached anew", "moved")
	var rows []reschemeRow
	rng := rand.New(rand.NewSource(seed))
	for _, n := range ns {
		keys := make([]dht.Key, n)
		for i := range keys {
			rng.Read(keys[i][:])
		}
		S := max(1, int(math.Round(f*float64(n))))
		for _, c := range [][2]int{{S, S + 1}, {S + 1, S}} {
			from, err := superpeer.Exact(c[0])
			if err != nil {
				return nil, nil, err
			}
			to, err := superpeer.Exact(c[1])
			if err != nil {
				return nil, nil, err
			}
			r, err := sim.PrefixRescheme(keys, from, to, 2*int(math.Ceil(1/f)), 3*time.Minute)
			if err != nil {
				return nil, nil, err
			}
			row := reschemeRow{N: n, From: c[0], To: c[1], Members: r.Members, Attached: r.Attached, Moved: r.Moved}
			rows = append(rows, row)
			t.Add(n, row.From, row.To, row.Members, row.Attached, row.Moved)
		}
	}
	return rows, t, nil
}
