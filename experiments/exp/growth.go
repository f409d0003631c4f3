package exp

import (
	"fmt"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/internal/census"
)

func init() {
	register(Experiment{
		Name:    "growth",
		Summary: "a superpeer count that follows a fraction f of the network as it grows and shrinks (the census): S against f·n, re-selected peers per step of S, agreement time, messages (simulator, prefix)",
		run:     runGrowth,
	})
}

type growthParams struct {
	common
	Fraction float64 `json:"fraction"`
	// Phases are the network sizes in turn, each reached over Ramp and
	// held for Hold (virtual time).
	Phases []int    `json:"phases"`
	Ramp   string   `json:"ramp"`
	Hold   string   `json:"hold"`
	Seeds  int      `json:"seeds"`
	Notes  []string `json:"notes"`
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
}

func runGrowth(o Options, r *report.Run) error {
	p := growthParams{common: commonOf(o), Fraction: 0.01, Seeds: 3,
		Phases: []int{100, 1000, 10_000, 100_000, 1_000_000, 100_000, 10_000, 1000},
		Ramp:   "1m", Hold: "4m",
		Notes: []string{
			"simulator (sim.PrefixGrowth): the prefix method's superpeers run the census of internal/census — the code the peers run — on virtual time; a superpeer per group of the exact code of the S it holds, reporting its members and key share, exchanging tables with a random other superpeer every 5 s; a new value reaches a group's clients at their next renewal (10 s) and the new groups' superpeers take their place then",
			"keys are seeded random 256-bit keys (not derived identities), so a million peers fit; peers join or leave in ten batches over each phase's ramp",
			"repel in the simulator and the live swarms are not here yet",
		}}
	if o.Quick {
		p.Phases, p.Seeds = []int{100, 1000, 10_000, 1000}, 1
	}
	if o.tiny {
		p.Phases, p.Seeds, p.Ramp, p.Hold = []int{100, 1000, 300}, 1, "30s", "2m"
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
	var ss []report.Series
	lo, hi := 1.0, 1.0
	for k := 0; k < p.Seeds; k++ {
		s := series[o.Seed+int64(k)]
		for _, x := range s.X {
			hi = max(hi, x)
		}
		ss = append(ss, *s)
	}
	ss = append(ss, report.Series{Name: "S = f·n", X: []float64{lo, hi}, Y: []float64{lo, hi}})
	if err := r.Lines("superpeers-vs-target", report.Figure{Title: fmt.Sprintf("prefix: agreed S against f·n (f = %g, simulator)", p.Fraction), X: "f·n", Y: "superpeers S", LogX: true, LogY: true, Legend: "top-left"}, ss); err != nil {
		return err
	}
	return r.WriteResults(p, map[string]any{"growth": map[string]any{"steady": rows}})
}
