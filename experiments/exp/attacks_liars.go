package exp

import (
	"fmt"
	"slices"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// liarsParams are the coordinate-liar part of the attacks experiment.
type liarsParams struct {
	Latency   string    `json:"latency"`
	N         int       `json:"n"`
	S         int       `json:"s"`
	C         int       `json:"capacity"`
	Rounds    int       `json:"vivaldi_rounds"`
	Seeds     []int64   `json:"seeds"`
	Fractions []float64 `json:"fractions"`
	Kinds     []string  `json:"kinds"`
	// Defence is the fields the rows with defence true run with:
	// vivaldi.DefaultConfig's (the triangle test and the error floor, on
	// by default) and the opt-in outlier test at liarOutlierFactor; the
	// rows with false run without any (OutlierFactor, OutlierMin,
	// TriangleMargin and RemoteErrorMin zero).
	Defence map[string]float64 `json:"defence"`
	// CoordCheck is the repel.Config.CoordCheck of the rows with the
	// defence (the product's default, 0, unless a run asks for one).
	CoordCheck float64 `json:"coord_check"`
	// The goal, with the defence, at GoalFraction liars: honest error and
	// client RTT at most these ratios to the clean run's, and the liars'
	// share of the tokens at most their share of the peers.
	GoalFraction   float64  `json:"goal_fraction"`
	GoalErrorRatio float64  `json:"goal_error_ratio"`
	GoalRTTRatio   float64  `json:"goal_client_rtt_ratio"`
	Notes          []string `json:"notes"`
}

// liarsRow is one kind, fraction and defence setting over the seeds.
type liarsRow struct {
	Kind     string  `json:"kind"`
	Fraction float64 `json:"fraction"`
	// Defence: the model's defences against liars on (the triangle test
	// and the error floor, vivaldi.DefaultConfig's); OutlierTest: the
	// opt-in outlier test too.
	Defence     bool `json:"defence"`
	OutlierTest bool `json:"outlier_test"`
	// The ratios are means over the seeds of each seed's ratio to its
	// clean run with the same defence setting (the clean rows: to the
	// clean run without it, the defence's own cost); the share is the
	// mean over the seeds of the liars' share of the tokens at the end.
	HonestMedianErrorRatio float64 `json:"honest_median_error_ratio"`
	ClientRTTRatio         float64 `json:"client_rtt_ratio"`
	LiarTokenShare         float64 `json:"liar_token_share"`
	// CleanTokenShare is the share of the tokens the same peers held in
	// the clean run with the same defence setting, where nobody lies
	// (mean over the seeds): what the liars' peers hold honestly.
	CleanTokenShare float64 `json:"clean_token_share"`
	// Worst seed's ratios and share.
	HonestMedianErrorRatioMax float64 `json:"honest_median_error_ratio_max"`
	ClientRTTRatioMax         float64 `json:"client_rtt_ratio_max"`
	LiarTokenShareMax         float64 `json:"liar_token_share_max"`
	// Means over the seeds of the figures behind the ratios.
	HonestMedianError float64 `json:"honest_median_error"`
	HonestP90Error    float64 `json:"honest_p90_error"`
	ClientRTT         float64 `json:"client_rtt_ms"`
	// Shares of the honest peers' samples of liars and of honest peers
	// that their model refused (vivaldi.ErrImplausible), over the seeds.
	LiarSamplesRefused   float64 `json:"liar_samples_refused"`
	HonestSamplesRefused float64 `json:"honest_samples_refused"`
	// Clients that honest holders left out of their token's placement
	// as their coordinates misfit their RTT (repel.Config.CoordCheck),
	// liars and honest peers: means over the seeds.
	CoordMisfitsLiars  float64 `json:"coord_misfits_liars"`
	CoordMisfitsHonest float64 `json:"coord_misfits_honest"`
	// Unattached honest clients (summed) and runs whose tokens settled.
	Unattached int `json:"honest_unattached"`
	Settled    int `json:"repel_settled_runs"`
	// GoalMet is set on the rows the goal is about (GoalFraction, defence
	// true, either setting).
	GoalMet *bool             `json:"goal_met,omitempty"`
	PerSeed []*sim.LiarResult `json:"per_seed"`
}

// liarOutlierFactor is the opt-in vivaldi.Config.OutlierFactor the rows
// with the outlier test run with.
const liarOutlierFactor = 5

// liarSetting is a row's defence: none, vivaldi.DefaultConfig's, or that
// with the opt-in outlier test.
type liarSetting struct{ defence, outlier bool }

func (s liarSetting) String() string {
	switch {
	case s.outlier:
		return "default+outlier"
	case s.defence:
		return "default"
	}
	return "none"
}

// liarDefence is the configuration that defends against coordinate liars
// at its fullest, by field name.
func liarDefence() map[string]float64 {
	c := liarConfig(liarSetting{true, true})
	return map[string]float64{"OutlierFactor": c.OutlierFactor, "OutlierAfter": float64(c.OutlierAfter), "OutlierMin": c.OutlierMin,
		"TriangleMargin": c.TriangleMargin, "RemoteErrorMin": c.RemoteErrorMin}
}

// liarSpace is seed's latency space and peer identities for the liars
// table.
func liarSpace(p liarsParams, seed int64) (latency.RTTs, []string, error) {
	rtt, _, err := space(p.Latency, p.N, seed)
	if err != nil {
		return nil, nil, err
	}
	ids, _, err := sim.Identities(seed, p.N, nil)
	if err != nil {
		return nil, nil, err
	}
	return rtt, sim.IDStrings(ids), nil
}

// liarRun is one run of the liars table: seed's latency space and
// identities, liars of kind at fraction, the defence setting (and with it
// the coordinate check p.CoordCheck).
func liarRun(p liarsParams, rtt latency.RTTs, ids []string, seed int64, kind sim.LiarKind, fraction float64, set liarSetting) sim.LiarOptions {
	cfg := liarConfig(set)
	rc := repelConfig(p.S)
	if set.defence {
		rc.CoordCheck = p.CoordCheck
	}
	return sim.LiarOptions{RTT: rtt, IDs: ids, Seed: seed, Kind: kind, Liars: sim.PickLiars(p.N, fraction, seed),
		Vivaldi: &cfg, Rounds: p.Rounds, Repel: rc, Capacity: p.C}
}

// liarConfig is vivaldi.DefaultConfig under the setting.
func liarConfig(s liarSetting) vivaldi.Config {
	c := vivaldi.DefaultConfig()
	if s.outlier {
		c.OutlierFactor = liarOutlierFactor
	}
	if !s.defence {
		c.OutlierFactor, c.OutlierMin, c.TriangleMargin, c.RemoteErrorMin = 0, 0, 0, 0
	}
	return c
}

// liarsDefaults is the liars table's full size and goal, the coordinate
// check coordCheck in the rows with the defence.
func liarsDefaults(coordCheck float64) liarsParams {
	return liarsParams{Latency: latency.Default, N: 490, S: 16, Rounds: 1000,
		Fractions: []float64{0.05, 0.1, 0.2, 0.3}, Defence: liarDefence(), CoordCheck: coordCheck,
		GoalFraction: 0.2, GoalErrorRatio: 1.5, GoalRTTRatio: 1.2,
		Notes: []string{
			"each run: sim.SimulateVivaldi for vivaldi_rounds rounds with a seeded fraction of the peers lying (sim.PickLiars: a smaller fraction's liars are among a larger one's) in every answer to a Vivaldi request (sim.Liar), then sim.SimulateRepel over the final coordinates held fixed (a liar's claim then: what it announces, offers and attaches with), repel.DefaultConfig with MaxCandidates 64, clients attaching as the live selector (sim.AttachSelector, capacity C = 2⌈n/S⌉, displace superpeer.DefaultDisplace); liars keep an honest model of their own and run the token method honestly but for their coordinate",
			fmt.Sprintf("kinds (every liar claims error %g but frog-boiling %g): inflation, its true coordinate moved %g s along a direction of its own, %g s more height; deflation, the origin with the least height; oscillation, a fresh random point each answer (components uniform in ±%g/√dims s, height up to %g s); frog-boiling, its true coordinate plus an offset all liars grow in one direction at %g s per second from a %d-th of the run on", sim.LieError, sim.FrogError, sim.LieFar, sim.LieHeight, sim.LieFar, sim.LieHeight, sim.FrogRate, sim.FrogOfRuns),
			"defence none (defence false): vivaldi.DefaultConfig without the triangle test, the floor under claimed errors and the outlier test (OutlierFactor, OutlierMin, TriangleMargin, RemoteErrorMin zero); default (defence true, outlier_test false; full runs only): vivaldi.DefaultConfig, the triangle test and the floor, on by default; default+outlier (defence true, outlier_test true): with the opt-in outlier test as well (OutlierFactor 5, once settled or after OutlierAfter samples), the field defence in params",
			"honest_median_error: the median relative error |predicted − true|/true over every pair of honest peers (their own coordinates against the matrix); client_rtt_ms: the mean true RTT of honest clients (neither liars nor holders) to the holder they are attached to, over the clients that are that in both runs for the ratio",
			"ratios: each seed's to its clean run (no liars) with the same defence setting, the mean over the seeds; the clean rows (kind none) give the defence's own cost, the clean run with it over the clean run without any",
			"liar_token_share: the liars' share of the token holders at the end, the mean over the seeds; the goal asks for at most the liars' share of the peers; clean_token_share (same peers honest): the share the same peers held in the clean run with the same defence setting, where nobody lies",
			"misfits: the clients honest holders left out of their token's placement, their coordinates disagreeing with the holder's RTT to them (repel.Config.CoordCheck: coord_check with the defence, 0 without), liars' and honest peers', per seed",
			"samples refused: the share of the honest peers' samples of liars (of honest peers) that their model refused as implausible",
		}}
}

// runLiars runs Vivaldi and then the token method with coordinate liars
// among the peers, of each kind and fraction, without and with the
// defence, against clean runs on the same seeds, and writes the liars
// table.
func runLiars(o Options, r *report.Run) (liarsParams, []liarsRow, error) {
	p := liarsDefaults(o.liarCoordCheck)
	seeds := 3
	settings := []liarSetting{{false, false}, {true, false}, {true, true}}
	switch {
	case o.tiny:
		p.N, p.S, p.Rounds, p.Fractions, seeds = 120, 4, 300, []float64{0.3}, 1
		settings = []liarSetting{{false, false}, {true, true}}
	case o.Quick:
		p.Rounds, p.Fractions, seeds = 300, []float64{p.GoalFraction}, 1
		settings = []liarSetting{{false, false}, {true, true}}
	case o.liarSeeds > 0:
		p.Fractions, seeds = []float64{p.GoalFraction}, o.liarSeeds
		settings = []liarSetting{{false, false}, {true, true}}
	}
	kinds := sim.LiarKinds
	if o.tiny {
		kinds = []sim.LiarKind{sim.Deflation}
	}
	for _, k := range kinds {
		p.Kinds = append(p.Kinds, k.String())
	}
	for k := 0; k < seeds; k++ {
		p.Seeds = append(p.Seeds, o.Seed+int64(k))
	}
	p.C = capacityFor(p.N, p.S)
	type key struct {
		kind     string
		fraction float64
		set      liarSetting
	}
	rows := map[key]*liarsRow{}
	var order []key
	add := func(k key, res, clean, cleanOff *sim.LiarResult, liars []bool) {
		row := rows[k]
		if row == nil {
			row = &liarsRow{Kind: k.kind, Fraction: k.fraction, Defence: k.set.defence, OutlierTest: k.set.outlier}
			rows[k] = row
			order = append(order, k)
		}
		base := clean
		if k.kind == "none" {
			base = cleanOff
		}
		er := res.HonestMedian / base.HonestMedian
		rr := sim.ClientRTTOver(res.PerClient, base.PerClient) / sim.ClientRTTOver(base.PerClient, res.PerClient)
		share := 0.0
		if res.Holders > 0 {
			share = float64(res.LiarHolders) / float64(res.Holders)
		}
		w := 1 / float64(seeds)
		if liars != nil && len(clean.HolderPeers) > 0 {
			row.CleanTokenShare += w * float64(clean.HeldBy(liars)) / float64(len(clean.HolderPeers))
		}
		row.HonestMedianErrorRatio += w * er
		row.ClientRTTRatio += w * rr
		row.LiarTokenShare += w * share
		row.HonestMedianErrorRatioMax = max(row.HonestMedianErrorRatioMax, er)
		row.ClientRTTRatioMax = max(row.ClientRTTRatioMax, rr)
		row.LiarTokenShareMax = max(row.LiarTokenShareMax, share)
		row.HonestMedianError += w * res.HonestMedian
		row.HonestP90Error += w * res.HonestP90
		row.ClientRTT += w * res.ClientRTT
		if res.LiarSamples > 0 {
			row.LiarSamplesRefused += w * float64(res.LiarRefused) / float64(res.LiarSamples)
		}
		if res.HonestSamples > 0 {
			row.HonestSamplesRefused += w * float64(res.HonestRefused) / float64(res.HonestSamples)
		}
		row.CoordMisfitsLiars += w * float64(res.CoordMisfitLiars)
		row.CoordMisfitsHonest += w * float64(res.CoordMisfitHonest)
		row.Unattached += res.Unattached
		if res.RepelSettled {
			row.Settled++
		}
		row.PerSeed = append(row.PerSeed, res)
	}
	total := seeds * len(settings) * (1 + len(kinds)*len(p.Fractions))
	bar := report.NewProgress(o.Stderr, "liars (runs)", total)
	done := 0
	for _, seed := range p.Seeds {
		rtt, idStrs, err := liarSpace(p, seed)
		if err != nil {
			return p, nil, err
		}
		run := func(kind sim.LiarKind, fraction float64, set liarSetting) (*sim.LiarResult, error) {
			res, err := sim.SimulateLiars(liarRun(p, rtt, idStrs, seed, kind, fraction, set))
			done++
			bar.Set(done)
			return res, err
		}
		clean := map[liarSetting]*sim.LiarResult{}
		for _, set := range settings {
			if clean[set], err = run(0, 0, set); err != nil {
				return p, nil, err
			}
		}
		none := clean[liarSetting{}]
		for _, set := range settings {
			add(key{"none", 0, set}, clean[set], clean[set], none, nil)
		}
		for _, f := range p.Fractions {
			for _, k := range kinds {
				for _, set := range settings {
					res, err := run(k, f, set)
					if err != nil {
						return p, nil, err
					}
					add(key{k.String(), f, set}, res, clean[set], none, sim.PickLiars(p.N, f, seed))
				}
			}
		}
	}
	bar.Finish()
	// Rows by fraction, then kind, then defence.
	kindAt := map[string]int{"none": -1}
	for i, k := range p.Kinds {
		kindAt[k] = i
	}
	rank := func(s liarSetting) int {
		switch {
		case s.outlier:
			return 2
		case s.defence:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(order, func(a, b key) int {
		switch {
		case a.fraction != b.fraction:
			return cmpFloat(a.fraction, b.fraction)
		case a.kind != b.kind:
			return kindAt[a.kind] - kindAt[b.kind]
		}
		return rank(a.set) - rank(b.set)
	})
	t := report.NewTable("liars", "kind", "defence", "honest err ×", "client RTT ×", "liar tokens", "same peers honest", "honest err", "p90", "client RTT ms", "liar samples refused", "honest refused", "misfits: liars / honest", "worst seed err× / RTT× / tokens", "goal")
	var out []liarsRow
	for _, k := range order {
		row := rows[k]
		goal := "-"
		if row.Defence && row.Fraction == p.GoalFraction && row.Kind != "none" {
			met := row.HonestMedianErrorRatio <= p.GoalErrorRatio && row.ClientRTTRatio <= p.GoalRTTRatio && row.LiarTokenShare <= row.Fraction
			row.GoalMet = &met
			goal = fmt.Sprint(met)
		}
		t.Add(fmt.Sprintf("%g%%", 100*row.Fraction), row.Kind, k.set.String(), row.HonestMedianErrorRatio, row.ClientRTTRatio, row.LiarTokenShare,
			row.CleanTokenShare, row.HonestMedianError, row.HonestP90Error, row.ClientRTT, row.LiarSamplesRefused, row.HonestSamplesRefused,
			fmt.Sprintf("%.1f / %.1f", row.CoordMisfitsLiars, row.CoordMisfitsHonest),
			fmt.Sprintf("%.2f / %.2f / %.2f", row.HonestMedianErrorRatioMax, row.ClientRTTRatioMax, row.LiarTokenShareMax), goal)
		out = append(out, *row)
	}
	err := printTable(o, r, "liars", fmt.Sprintf("coordinate liars: n = %d, S = %d, C = %d, %s, %d Vivaldi rounds, seeds %v; ratios to the clean run with the same defence (clean rows: over the clean run without any)", p.N, p.S, p.C, p.Latency, p.Rounds, p.Seeds), t)
	return p, out, err
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
