package exp

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	register(Experiment{
		Name:    "attacks",
		Summary: "adversaries against superpeer selection: ID grinding against the prefix method (the identities, and CPU time at this machine's derivation rate, an attacker needs to take a chosen group, and a fraction of all superpeers, as n grows), and what a new salt of the defence costs a live prefix swarm (groups re-selected, clients re-attached and unserved, requests); floods of garbage, oversized and useless frames on one peer over TCP loopback, without and with the defences (drops by reason, honest renewals, memory); coordinate liars (inflation, deflation, oscillation, frog-boiling) among Vivaldi peers in the simulator, without and with the Vivaldi defence (honest error and repel's client RTT against a clean run, the liars' share of the tokens); survey and regret liars in the simulator, without and with the holders' checks (the liars' share of the tokens, their RTT gain, the honest clients' RTT and displacements)",
		run:     runAttacks,
	})
}

type attacksParams struct {
	common
	// N are the network sizes; Fraction f sets S = max(1, round(f·n)).
	N        []int   `json:"n"`
	Fraction float64 `json:"fraction"`
	// Trials per n (each a fresh honest network and a seeded attacker).
	Trials int `json:"trials"`
	// Take are the shares of all superpeers the attacker aims for.
	Take []float64 `json:"take"`
	// Puzzles are the defence's puzzle sizes c (superpeer.WithIDPuzzle,
	// with WithSalt); Epoch the salt's period the per-epoch figures
	// assume, in seconds.
	Puzzles []int   `json:"puzzles"`
	Epoch   float64 `json:"epoch_seconds"`
	// Holdings are the identity fractions f of the salted-share part
	// (attacks_grind.go), SaltTrials the salts drawn for each.
	Holdings   []float64 `json:"holdings"`
	SaltTrials int       `json:"salt_trials"`
	// Rate is the identities per second one core of this machine derives
	// (sim.Identity: a seeded Ed25519 key, its peer ID and kad key),
	// measured for RateSeconds at the start of the run.
	Rate        float64 `json:"identities_per_core_second"`
	RateSeconds float64 `json:"rate_seconds"`
	Notes       []string
	// SaltChanges are the live salt-change part's (attacks_salt.go).
	SaltChanges saltParams `json:"salt_changes"`
	// Floods are the flood part's (attacks_flood.go).
	Floods floodParams `json:"floods"`
	// Liars are the coordinate-liar part's (attacks_liars.go).
	Liars liarsParams `json:"liars"`
	// Reports are the survey- and regret-liar part's
	// (attacks_reports.go).
	Reports reportParams `json:"report_liars"`
}

// grindRow is one n: what taking a chosen group, and a share of all
// groups, cost the attacker (means over the trials).
type grindRow struct {
	N int `json:"n"`
	S int `json:"s"`
	// Defence rows have a puzzle of Puzzle bits and salted group keys;
	// their tries are those of the row without (an identity that solves
	// the puzzle lands in the key space as any does) and each costs 2^c
	// derivations, the mean of the geometric count.
	Defence bool `json:"defence"`
	Puzzle  int  `json:"puzzle_bits"`
	// IdentitiesPerSecond is what one core derives (the measured rate);
	// CaptureGroupSeconds and CaptureFractionSeconds the CPU seconds of
	// a chosen group and of each share of all groups (Seconds and Take,
	// in the shape of the results); with the salt they buy the
	// place for one epoch only.
	IdentitiesPerSecond    float64            `json:"identities_per_second"`
	CaptureGroupSeconds    float64            `json:"capture_group_seconds"`
	CaptureFractionSeconds map[string]float64 `json:"capture_fraction_seconds"`
	// HonestJoinSeconds is an honest peer's cost of its identity: the
	// median measured (HonestMeasured) or 2^c over the rate.
	HonestJoinSeconds float64 `json:"honest_join_seconds"`
	HonestMeasured    bool    `json:"honest_measured"`
	// GroupsPerCoreEpoch is how many groups one core grinds its way into
	// within an epoch of the salt (Epoch / CaptureGroupSeconds; the
	// first groups, each about as dear).
	GroupsPerCoreEpoch float64 `json:"groups_per_core_epoch,omitempty"`
	Members            float64 `json:"target_group_members"`
	// Tries are attacker identities derived until one was its chosen
	// group's superpeer, the median over the trials (the mean is
	// dominated by networks whose nearest member is very near the group
	// key: for one network the tries are geometric with the chance that a
	// key in the group is nearer still, and over networks their mean
	// diverges); Seconds that at the measured rate on one core.
	Tries    float64 `json:"tries"`
	TriesMax float64 `json:"tries_max"`
	Seconds  float64 `json:"cpu_seconds"`
	// Predicted is S·(m+1) for a group of m members: a new key lands in
	// the group with probability 1/S (the exact code's shares are 1/2^k
	// or 1/2^(k−1); the mean over groups) and beats its m members with
	// probability 1/(m+1).
	Predicted float64 `json:"predicted_tries"`
	// Take maps each share of all superpeers to the tries (median) and
	// CPU seconds until the attacker held that many groups.
	Take []grindTake `json:"take"`
}

type grindTake struct {
	Share   float64 `json:"share"`
	Tries   float64 `json:"tries"`
	Seconds float64 `json:"cpu_seconds"`
}

func runAttacks(o Options, r *report.Run) error {
	p := attacksParams{common: commonOf(o), Fraction: 0.01, Trials: 31, Take: []float64{0.1, 0.5}, RateSeconds: 2,
		N: []int{1000, 10_000, 100_000, 1_000_000}, Puzzles: []int{10, 16}, Epoch: 3600,
		Holdings: []float64{0.05, 0.1, 0.2, 0.3}, SaltTrials: 31,
		Notes: []string{
			"grinding (prefix): the superpeer of a group is the member XOR-closest to its key (the exact code of S = round(f·n) groups), so an attacker derives identities until one lands in the group and beats its members; honest keys are seeded random 256-bit keys, attacker keys too (the derivation's cost is counted at the measured rate, not spent)",
			"the rate is single-core sim.Identity calls (a seeded Ed25519 key, peer.IDFromPrivateKey, the SHA-256 kad key), what a peer's identity costs here",
			"a chosen group: the group of a seeded random honest peer; a share of all: attacker keys accumulate until they are the nearest of that many groups",
			"the defence (superpeer.WithIDPuzzle(c) and WithSalt): only identities with c leading zero bits of SHA-256(key) are superpeers, so an honest identity costs 2^c derivations once and every try of an attacker 2^c; the group keys are salted per epoch with a value nobody knows before it, so a place ground for one epoch is lost with the next",
			"salted shares: the attacker holds a fraction f of the identities, made before the salt; it places them at random (spread) or grinds them into as few groups as maximises its share (concentrated; the grinding's CPU is counted); the salt then moves every group key, and the attacker's share of the groups is counted over the salts",
		}}
	if o.Quick {
		p.N, p.Trials, p.RateSeconds, p.SaltTrials = []int{1000, 10_000, 100_000}, 15, 1, 15
	}
	if o.tiny {
		p.N, p.Trials, p.RateSeconds, p.Take, p.Puzzles, p.Holdings, p.SaltTrials = []int{300, 3000}, 3, 0.1, []float64{0.5}, []int{4}, []float64{0.2}, 3
	}
	rate, err := identityRate(time.Duration(p.RateSeconds * float64(time.Second)))
	if err != nil {
		return err
	}
	p.Rate = rate
	fmt.Fprintf(o.Stdout, "identity derivation: %.0f per second on one core\n", rate)
	t := report.NewTable("n", "S", "defence", "group members", "tries (chosen group, median)", "max", "S·(m+1)", "CPU s", "share", "tries (share, median)", "CPU s (share)")
	var rows []grindRow
	bar := report.NewProgress(o.Stderr, "grinding", len(p.N)*p.Trials)
	for k, n := range p.N {
		S := max(1, int(math.Round(p.Fraction*float64(n))))
		scheme, err := superpeer.Exact(S)
		if err != nil {
			return err
		}
		row := grindRow{N: n, S: S, Take: make([]grindTake, len(p.Take))}
		var chosen []float64
		take := make([][]float64, len(p.Take))
		for trial := 0; trial < p.Trials; trial++ {
			rng := rand.New(rand.NewSource(o.Seed*7919 + int64(k)*104729 + int64(trial)))
			g := grind(rng, n, scheme, p.Take)
			row.Members += float64(g.members) / float64(p.Trials)
			row.Predicted += float64(S) * float64(g.members+1) / float64(p.Trials)
			chosen = append(chosen, float64(g.chosen))
			row.TriesMax = max(row.TriesMax, float64(g.chosen))
			for j, tr := range g.take {
				take[j] = append(take[j], float64(tr))
			}
			bar.Set(k*p.Trials + trial + 1)
		}
		row.Tries = median(chosen)
		for j := range row.Take {
			row.Take[j].Share, row.Take[j].Tries = p.Take[j], median(take[j])
		}
		row.price(rate, 0)
		for j := range row.Take {
			t.Add(n, S, "none", row.Members, row.Tries, row.TriesMax, row.Predicted, row.Seconds, row.Take[j].Share, row.Take[j].Tries, row.Take[j].Seconds)
		}
		rows = append(rows, row)
	}
	bar.Finish()
	honest, err := honestCost(p.Puzzles, rate, o.Quick || o.tiny)
	if err != nil {
		return err
	}
	var defended []grindRow
	for _, row := range rows {
		for _, c := range p.Puzzles {
			d := row
			d.Defence, d.Puzzle = true, c
			d.Take = slices.Clone(row.Take)
			d.price(rate, c)
			d.HonestJoinSeconds, d.HonestMeasured = honest[c].seconds, honest[c].measured
			d.GroupsPerCoreEpoch = p.Epoch / d.CaptureGroupSeconds
			for j := range d.Take {
				t.Add(d.N, d.S, fmt.Sprintf("puzzle %d + salt", c), d.Members, d.Tries, d.TriesMax, d.Predicted, d.Seconds, d.Take[j].Share, d.Take[j].Tries, d.Take[j].Seconds)
			}
			defended = append(defended, d)
		}
	}
	rows = append(rows, defended...)
	if err := printTable(o, r, "grinding", fmt.Sprintf("ID grinding against prefix (f = %g; %d trials; %.0f identities per core-second)", p.Fraction, p.Trials, rate), t); err != nil {
		return err
	}
	var ss []report.Series
	for _, c := range append([]int{0}, p.Puzzles...) {
		name := "no defence"
		if c > 0 {
			name = fmt.Sprintf("puzzle %d + salt (one epoch)", c)
		}
		chosen := report.Series{Name: "a chosen group, " + name, Points: true}
		shares := make([]report.Series, len(p.Take))
		for j, share := range p.Take {
			shares[j] = report.Series{Name: fmt.Sprintf("%g of all, %s", share, name), Points: true}
		}
		for _, row := range rows {
			if row.Puzzle != c {
				continue
			}
			chosen.X = append(chosen.X, float64(row.N))
			chosen.Y = append(chosen.Y, row.Seconds)
			for j := range shares {
				shares[j].X = append(shares[j].X, float64(row.N))
				shares[j].Y = append(shares[j].Y, row.Take[j].Seconds)
			}
		}
		ss = append(append(ss, chosen), shares...)
	}
	if err := r.Lines("grinding", report.Figure{Title: fmt.Sprintf("ID grinding against prefix: one core's time (S = %g·n)", p.Fraction), X: "peers n", Y: "CPU seconds", LogX: true, LogY: true, Legend: "top-left"}, ss); err != nil {
		return err
	}
	salted, err := runSaltedShares(o, r, p)
	if err != nil {
		return err
	}
	sp, changes, err := runSaltChanges(o, r)
	if err != nil {
		return err
	}
	p.SaltChanges = sp
	fp, floods, err := runFloods(o, r)
	if err != nil {
		return err
	}
	p.Floods = fp
	lp, liars, err := runLiars(o, r)
	if err != nil {
		return err
	}
	p.Liars = lp
	rp, surveys, regrets, err := runReportLiars(o, r)
	if err != nil {
		return err
	}
	p.Reports = rp
	return r.WriteResults(p, map[string]any{"attacks": map[string]any{"grinding": rows, "salted_shares": salted, "salt_changes": changes, "floods": floods, "liars": liars,
		"survey_liars": surveys, "regret_liars": regrets}})
}

// median is the median of xs (which it sorts).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// identityRate measures sim.Identity calls per second on one goroutine
// for about d.
func identityRate(d time.Duration) (float64, error) {
	start := time.Now()
	n := 0
	for ; n < 64 || time.Since(start) < d; n++ {
		if _, err := sim.Identity(int64(n), n); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// grindResult is one trial: the chosen group's members, the tries until
// the attacker held it, and the tries until it held each share of all.
type grindResult struct {
	members, chosen int
	take            []int
}

// grind builds an honest network of n random keys under scheme and lets an
// attacker draw random keys: chosen counts the draws until one is the
// superpeer of a seeded random honest peer's group, take those until the
// attacker is the superpeer of each share of all groups (empty groups, with
// no honest member, are taken by any attacker key in them).
func grind(rng *rand.Rand, n int, scheme superpeer.Prefix, shares []float64) grindResult {
	G := scheme.Groups()
	best := make([]dht.Key, G) // the honest member nearest each group key
	has := make([]bool, G)
	members := make([]int, G)
	var target int
	for i := 0; i < n; i++ {
		var k dht.Key
		rng.Read(k[:])
		g := scheme.Group(k)
		members[g]++
		if !has[g] || scheme.GroupKey(g).Closer(k, best[g]) {
			best[g], has[g] = k, true
		}
		if i == 0 {
			target = g
		}
	}
	res := grindResult{members: members[target], chosen: -1, take: make([]int, len(shares))}
	for j := range res.take {
		res.take[j] = -1
	}
	held := make([]bool, G)
	count := 0
	for tries := 1; ; tries++ {
		var k dht.Key
		rng.Read(k[:])
		g := scheme.Group(k)
		if !held[g] && (!has[g] || scheme.GroupKey(g).Closer(k, best[g])) {
			held[g] = true
			count++
			if g == target && res.chosen < 0 {
				res.chosen = tries
			}
			for j, s := range shares {
				if res.take[j] < 0 && float64(count) >= math.Ceil(s*float64(G)) {
					res.take[j] = tries
				}
			}
		}
		done := res.chosen >= 0
		for _, t := range res.take {
			done = done && t >= 0
		}
		if done {
			return res
		}
	}
}
