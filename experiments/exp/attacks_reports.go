package exp

import (
	"fmt"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// reportParams are the survey- and regret-liar part of the attacks
// experiment: liars in what only they can measure.
type reportParams struct {
	Latency string `json:"latency"`
	N       int    `json:"n"`
	S       int    `json:"s"`
	C       int    `json:"capacity"`
	// TightC is the smaller capacity the regret rows also run with: at C
	// the settled holders have room for every client, and a regret
	// decides nothing. Capacities are the regret rows'.
	TightC       int       `json:"tight_capacity"`
	Capacities   []int     `json:"capacities"`
	Rounds       int       `json:"vivaldi_rounds"`
	AttachRounds int       `json:"attach_rounds"`
	Seeds        []int64   `json:"seeds"`
	Fractions    []float64 `json:"fractions"`
	LieScale     float64   `json:"survey_lie_scale"`
	// Defence is what the rows with defence true run with (the product's
	// defaults); the rows with false set SurveyCheck and RegretFactor to 0.
	Defence map[string]float64 `json:"defence"`
	Notes   []string           `json:"notes"`
}

// surveyLiarRow is one fraction of survey liars and one defence setting,
// over the seeds.
type surveyLiarRow struct {
	Liars    string  `json:"liars"` // "none", "one" or a percentage
	Fraction float64 `json:"fraction"`
	Defence  bool    `json:"defence"`
	// LiarPeerShare is the liars' share of the peers; LiarTokenShare
	// their share of the token holders at the end (mean over the seeds,
	// and the worst seed's).
	LiarPeerShare     float64 `json:"liar_peer_share"`
	LiarTokenShare    float64 `json:"liar_token_share"`
	LiarTokenShareMax float64 `json:"liar_token_share_max"`
	// Survey moves offered (to liars), and reports refused as
	// implausible (liars', honest candidates'), means over the seeds.
	SurveyOffers         float64 `json:"survey_offers"`
	SurveyOffersToLiars  float64 `json:"survey_offers_to_liars"`
	ReportsRefusedLiars  float64 `json:"reports_refused_liars"`
	ReportsRefusedHonest float64 `json:"reports_refused_honest"`
	// ClientRTTRatio is the honest clients' mean true RTT to their holder
	// over the clean run's with the same defence, over the clients that
	// are honest clients in both (clean rows: the clean run with the
	// defence over the one without); mean over the seeds and the worst.
	ClientRTTRatio    float64                 `json:"client_rtt_ratio"`
	ClientRTTRatioMax float64                 `json:"client_rtt_ratio_max"`
	ClientRTT         float64                 `json:"client_rtt_ms"`
	Unattached        int                     `json:"honest_unattached"`
	Settled           int                     `json:"repel_settled_runs"`
	PerSeed           []*sim.ReportLiarResult `json:"per_seed"`
}

// regretLiarRow is one fraction of regret liars, one capacity and one
// defence setting, over the seeds.
type regretLiarRow struct {
	Liars    string  `json:"liars"`
	Fraction float64 `json:"fraction"`
	Capacity int     `json:"capacity"`
	Defence  bool    `json:"defence"`
	// LiarRTTRatio is the liars' mean true RTT to their holder over what
	// the same peers get when they tell the truth (same holders, same
	// setting): below 1 is their gain. HonestRTTRatio is the honest
	// clients' likewise (clean rows: with the defence over without, no
	// liars). Means over the seeds; the RTTs in ms.
	LiarRTTRatio   float64 `json:"liar_rtt_ratio"`
	HonestRTTRatio float64 `json:"honest_rtt_ratio"`
	LiarRTT        float64 `json:"liar_rtt_ms"`
	HonestRTT      float64 `json:"honest_rtt_ms"`
	// Honest clients displaced by liars, all displacements, and regrets
	// the holders' bound lowered, means over the seeds.
	DisplacedByLiars float64         `json:"displaced_by_liars"`
	Displaced        float64         `json:"displaced"`
	Capped           float64         `json:"regrets_capped"`
	Unattached       int             `json:"unattached"`
	PerSeed          []regretLiarRun `json:"per_seed"`
}

// regretLiarRun is one seed of a regret row.
type regretLiarRun struct {
	Seed      int64           `json:"seed"`
	LiarRTT   float64         `json:"liar_rtt_ms"`
	HonestRTT float64         `json:"honest_rtt_ms"`
	Attach    sim.AttachStats `json:"attach"`
}

// reportDefence is the product's defence against survey and regret
// liars, by field name.
func reportDefence() map[string]float64 {
	c, a := repel.DefaultConfig(), repel.DefaultAttachConfig()
	return map[string]float64{"SurveyCheck": c.SurveyCheck, "SurveyFloorMs": ms(c.SurveyFloor),
		"RegretFactor": a.RegretFactor, "RegretMarginMs": ms(a.RegretMargin)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// liarsLabel names a fraction of n peers: "one" for a single liar.
func liarsLabel(f float64, n int) string {
	switch {
	case f == 0:
		return "none"
	case int(f*float64(n)+0.5) == 1:
		return "one"
	}
	return fmt.Sprintf("%g%%", 100*f)
}

// runReportLiars runs the token method with liars in their survey
// reports, and the attach step with liars in their regrets, without and
// with the defence, against clean runs on the same seeds, and writes the
// two tables.
func runReportLiars(o Options, r *report.Run) (reportParams, []surveyLiarRow, []regretLiarRow, error) {
	p := reportParams{Latency: latency.Default, N: 490, S: 16, TightC: 40, Rounds: 1000, AttachRounds: 20,
		LieScale: sim.SurveyLieScale, Defence: reportDefence()}
	seeds := 3
	switch {
	case o.tiny:
		p.N, p.S, p.TightC, p.Rounds, seeds = 200, 6, 40, 200, 1
	case o.Quick:
		p.Rounds, seeds = 300, 1
	}
	p.C = capacityFor(p.N, p.S)
	// One liar, and at C, change nothing that a quick run would show
	// (every settled holder has room): the full run only.
	p.Fractions, p.Capacities = []float64{1 / float64(p.N), 0.1}, []int{p.C, p.TightC}
	if o.tiny || o.Quick {
		p.Fractions, p.Capacities = []float64{0.1}, []int{p.TightC}
	}
	for k := 0; k < seeds; k++ {
		p.Seeds = append(p.Seeds, o.Seed+int64(k))
	}
	p.Notes = []string{
		"coordinates: sim.SimulateVivaldi for vivaldi_rounds rounds, vivaldi.DefaultConfig, no coordinate liars; one run per seed, shared by every row of the seed",
		fmt.Sprintf("survey liars: sim.SimulateReportLiars, the token method (repel.DefaultConfig, S tokens, MaxCandidates 64) over those coordinates, clients attaching as the live selector (capacity C, displace superpeer.DefaultDisplace); a liar surveyed as a candidate reports its true RTT to the holder (which the holder measures itself) and to the other holders, and %g of its true RTT to every client, to win the token; liars are honest otherwise", sim.SurveyLieScale),
		"regret liars: sim.SimulateAttach, attach_rounds rounds (15 s apart) of every client's attach step from scratch over the holders of the clean token run without the defence, at each of capacities (C, and tight_capacity at which holders fill up; quick: tight_capacity only); a liar claims to have no other choice (the largest regret) in every request; the same rounds with the liars telling the truth are the baseline, so the ratios are what the lie changes with the holders held fixed",
		"defence false: repel.Config.SurveyCheck 0 and repel.AttachConfig.RegretFactor 0 (every report and regret taken as said); true: the defaults, the field defence: a holder refuses a survey report whose RTT to it, whose RTTs to the other candidates (against theirs to it) or whose summed RTT to the clients (against the holder's RTT to each less its RTT to the candidate) fall short by more than SurveyCheck and SurveyFloor a peer, and a holder takes a regret at most RegretFactor × the coordinates' estimate (the predicted RTT to the nearest holder predicted no nearer, less the predicted RTT to itself) + RegretMargin",
		"liar fractions: one liar (sim.PickLiars at 1/n; full runs only) and 10%; a smaller fraction's liars are among a larger one's",
		"client_rtt_ratio (survey rows): the honest clients' mean true RTT to their holder over the clean run's with the same defence, over the clients honest and attached in both; the clean rows: the clean run with the defence over the one without (its cost)",
	}
	// Clean token runs, then the liars', per seed.
	type skey struct {
		f   float64
		def bool
	}
	type rkey struct {
		f   float64
		c   int
		def bool
	}
	srows, rrows := map[skey]*surveyLiarRow{}, map[rkey]*regretLiarRow{}
	w := 1 / float64(seeds)
	caps := p.Capacities
	total := seeds * (2 + 2*len(p.Fractions) + 2*len(caps)*(1+2*len(p.Fractions)))
	bar := report.NewProgress(o.Stderr, "survey and regret liars (runs)", total)
	done := 0
	tick := func() { done++; bar.Set(done) }
	for _, seed := range p.Seeds {
		rtt, _, err := space(p.Latency, p.N, seed)
		if err != nil {
			return p, nil, nil, err
		}
		ids, _, err := sim.Identities(seed, p.N, nil)
		if err != nil {
			return p, nil, nil, err
		}
		idStrs := sim.IDStrings(ids)
		vr, err := sim.SimulateVivaldi(sim.VivaldiOptions{RTT: rtt, Seed: seed, Rounds: p.Rounds})
		if err != nil {
			return p, nil, nil, err
		}
		configs := func(def bool) (repel.Config, repel.AttachConfig) {
			c, a := repelConfig(p.S), repel.DefaultAttachConfig()
			if !def {
				c.SurveyCheck, a.RegretFactor, a.RegretMargin = 0, 0, 0
			}
			return c, a
		}
		tokens := func(liars []bool, def bool) (*sim.ReportLiarResult, error) {
			c, a := configs(def)
			res, err := sim.SimulateReportLiars(sim.ReportLiarOptions{RTT: rtt, IDs: idStrs, Seed: seed,
				Coords: vr.Coords, Neighbors: vr.Neighbors, Liars: liars, Survey: true,
				Repel: c, Capacity: p.C, Choose: a})
			tick()
			return res, err
		}
		clean := map[bool]*sim.ReportLiarResult{}
		for _, def := range []bool{false, true} {
			if clean[def], err = tokens(nil, def); err != nil {
				return p, nil, nil, err
			}
		}
		addSurvey := func(f float64, def bool, res, base *sim.ReportLiarResult) {
			k := skey{f, def}
			row := srows[k]
			if row == nil {
				row = &surveyLiarRow{Liars: liarsLabel(f, p.N), Fraction: f, Defence: def, LiarPeerShare: float64(res.Liars) / float64(p.N)}
				srows[k] = row
			}
			share := 0.0
			if res.Holders > 0 {
				share = float64(res.LiarHolders) / float64(res.Holders)
			}
			ratio := sim.ClientRTTOver(res.Honest, base.Honest) / sim.ClientRTTOver(base.Honest, res.Honest)
			row.LiarTokenShare += w * share
			row.LiarTokenShareMax = max(row.LiarTokenShareMax, share)
			row.SurveyOffers += w * float64(res.SurveyOffers)
			row.SurveyOffersToLiars += w * float64(res.SurveyOffersLiars)
			row.ReportsRefusedLiars += w * float64(res.SurveyRefusedLiars)
			row.ReportsRefusedHonest += w * float64(res.SurveyRefused-res.SurveyRefusedLiars)
			row.ClientRTTRatio += w * ratio
			row.ClientRTTRatioMax = max(row.ClientRTTRatioMax, ratio)
			row.ClientRTT += w * res.ClientRTT
			row.Unattached += res.Unattached
			if res.Settled {
				row.Settled++
			}
			row.PerSeed = append(row.PerSeed, res)
		}
		addSurvey(0, false, clean[false], clean[false])
		addSurvey(0, true, clean[true], clean[false])
		for _, f := range p.Fractions {
			liars := sim.PickLiars(p.N, f, seed)
			for _, def := range []bool{false, true} {
				res, err := tokens(liars, def)
				if err != nil {
					return p, nil, nil, err
				}
				addSurvey(f, def, res, clean[def])
			}
		}
		// Regret liars over the holders of the clean run without the
		// defence.
		holders := clean[false].Superpeers
		attach := func(c int, liars []bool, def bool) (*sim.AttachRunResult, error) {
			_, a := configs(def)
			a.ProbeEvery = 5 * 15 * time.Second
			res, err := sim.SimulateAttach(sim.AttachRunOptions{RTT: rtt, IDs: idStrs, Seed: seed, Coords: vr.Coords,
				Holders: holders, Capacity: c, Displace: superpeer.DefaultDisplace, Choose: a,
				Rounds: p.AttachRounds, RegretLiars: liars})
			tick()
			return res, err
		}
		for _, c := range caps {
			honest := map[bool]*sim.AttachRunResult{}
			for _, def := range []bool{false, true} {
				if honest[def], err = attach(c, nil, def); err != nil {
					return p, nil, nil, err
				}
			}
			addRegret := func(f float64, def bool, liars []bool, res, base *sim.AttachRunResult) {
				k := rkey{f, c, def}
				row := rrows[k]
				if row == nil {
					row = &regretLiarRow{Liars: liarsLabel(f, p.N), Fraction: f, Capacity: c, Defence: def}
					rrows[k] = row
				}
				mask := func(per []float64, liar bool) []float64 {
					out := make([]float64, len(per))
					for i, d := range per {
						out[i] = -1
						if liars != nil && liars[i] == liar || liars == nil && !liar {
							out[i] = d
						}
					}
					return out
				}
				hr, hb := mask(res.PerClient, false), mask(base.PerClient, false)
				run := regretLiarRun{Seed: seed, HonestRTT: sim.ClientRTTOver(hr, hb), Attach: res.Stats}
				row.HonestRTTRatio += w * run.HonestRTT / sim.ClientRTTOver(hb, hr)
				if f > 0 {
					lr, lb := mask(res.PerClient, true), mask(base.PerClient, true)
					run.LiarRTT = sim.ClientRTTOver(lr, lb)
					row.LiarRTTRatio += w * run.LiarRTT / sim.ClientRTTOver(lb, lr)
				}
				row.HonestRTT += w * run.HonestRTT
				row.LiarRTT += w * run.LiarRTT
				row.DisplacedByLiars += w * float64(res.Stats.DisplacedByLiars)
				row.Displaced += w * float64(res.Stats.Displaced)
				row.Capped += w * float64(res.Stats.Capped)
				row.Unattached += res.Stats.Unattached
				row.PerSeed = append(row.PerSeed, run)
			}
			addRegret(0, false, nil, honest[false], honest[false])
			addRegret(0, true, nil, honest[true], honest[false])
			for _, f := range p.Fractions {
				liars := sim.PickLiars(p.N, f, seed)
				for _, def := range []bool{false, true} {
					res, err := attach(c, liars, def)
					if err != nil {
						return p, nil, nil, err
					}
					addRegret(f, def, liars, res, honest[def])
				}
			}
		}
	}
	bar.Finish()
	fs := append([]float64{0}, p.Fractions...)
	st := report.NewTable("liars", "defence", "liar share of peers", "liar token share", "worst seed", "survey offers to liars / all", "reports refused: liars / honest", "honest client RTT ×", "worst seed", "client RTT ms", "settled runs")
	var sout []surveyLiarRow
	for _, f := range fs {
		for _, def := range []bool{false, true} {
			row := srows[skey{f, def}]
			st.Add(row.Liars, def, row.LiarPeerShare, row.LiarTokenShare, row.LiarTokenShareMax,
				fmt.Sprintf("%.3g / %.3g", row.SurveyOffersToLiars, row.SurveyOffers),
				fmt.Sprintf("%.3g / %.3g", row.ReportsRefusedLiars, row.ReportsRefusedHonest),
				row.ClientRTTRatio, row.ClientRTTRatioMax, row.ClientRTT, fmt.Sprintf("%d/%d", row.Settled, seeds))
			sout = append(sout, *row)
		}
	}
	if err := printTable(o, r, "survey_liars", fmt.Sprintf("survey liars: n = %d, S = %d, C = %d, %s, %d Vivaldi rounds, seeds %v; liars report %g of their RTT to the clients; ratios to the clean run with the same defence (clean rows: with over without)", p.N, p.S, p.C, p.Latency, p.Rounds, p.Seeds, p.LieScale), st); err != nil {
		return p, nil, nil, err
	}
	rt := report.NewTable("liars", "capacity", "defence", "liar RTT ×", "honest RTT ×", "liar RTT ms", "honest RTT ms", "honest displaced by liars", "displaced", "regrets capped", "unattached")
	var rout []regretLiarRow
	for _, c := range caps {
		for _, f := range fs {
			for _, def := range []bool{false, true} {
				row := rrows[rkey{f, c, def}]
				rt.Add(row.Liars, c, def, row.LiarRTTRatio, row.HonestRTTRatio, row.LiarRTT, row.HonestRTT, row.DisplacedByLiars, row.Displaced, row.Capped, row.Unattached)
				rout = append(rout, *row)
			}
		}
	}
	err := printTable(o, r, "regret_liars", fmt.Sprintf("regret liars: n = %d, S = %d over the clean run's holders, %d attach rounds, seeds %v; liars claim no other choice; ratios to the same peers telling the truth (clean rows: with the defence over without)", p.N, p.S, p.AttachRounds, p.Seeds), rt)
	return p, sout, rout, err
}
