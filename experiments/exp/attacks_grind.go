package exp

import (
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/report"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// price fills the row's CPU figures for a puzzle of c bits (0: none):
// every try costs 2^c derivations at rate a core-second.
func (row *grindRow) price(rate float64, c int) {
	per := math.Ldexp(1, c) / rate
	row.IdentitiesPerSecond = rate
	row.Seconds = row.Tries * per
	row.CaptureGroupSeconds = row.Seconds
	row.CaptureFractionSeconds = map[string]float64{}
	for j := range row.Take {
		row.Take[j].Seconds = row.Take[j].Tries * per
		row.CaptureFractionSeconds[strconv.FormatFloat(row.Take[j].Share, 'g', -1, 64)] = row.Take[j].Seconds
	}
	if c == 0 {
		row.HonestJoinSeconds = 1 / rate
	}
}

// honestJoin is what an honest identity costs under a puzzle.
type honestJoin struct {
	seconds  float64
	measured bool
}

// honestCost measures what an honest peer pays for its identity under
// each puzzle: the median time of superpeer.PuzzleKey over seeded keys,
// where that fits a few seconds (one with quick); past it, 2^c derivations
// at the measured rate.
func honestCost(puzzles []int, rate float64, quick bool) (map[int]honestJoin, error) {
	const keys = 9
	budget := 4.0
	if quick {
		budget = 1
	}
	out := map[int]honestJoin{}
	for _, c := range puzzles {
		expected := math.Ldexp(1, c) / rate
		if expected*keys > budget {
			out[c] = honestJoin{seconds: expected}
			continue
		}
		var took []float64
		for i := 0; i < keys; i++ {
			start := time.Now()
			if _, _, err := superpeer.PuzzleKey(rand.New(rand.NewSource(int64(1000*c+i))), c); err != nil {
				return nil, err
			}
			took = append(took, time.Since(start).Seconds())
		}
		out[c] = honestJoin{seconds: median(took), measured: true}
	}
	return out, nil
}

// saltedShare is one (n, f): the share of the groups an attacker holding
// a fraction f of the identities, all made before the salt, holds once the
// salt is out, over SaltTrials salts.
type saltedShare struct {
	N        int     `json:"n"`
	S        int     `json:"s"`
	Fraction float64 `json:"fraction"`
	// Spread: the attacker's identities land at random. Concentrated:
	// ground into the Groups groups (of every power of two tried) that gave
	// the attacker its largest mean share; GrindSeconds is the CPU that
	// placing them cost at the first puzzle's price.
	Spread       float64 `json:"spread_share"`
	Concentrated float64 `json:"concentrated_share"`
	Groups       int     `json:"concentrated_groups"`
	GrindSeconds float64 `json:"concentrated_cpu_seconds"`
	// Unsalted is the share the same identities hold without the salt
	// when they are ground to the group keys instead (one each, as far as
	// they go): min(1, f·n / S).
	Unsalted float64 `json:"unsalted_share"`
}

// runSaltedShares measures saltedShare for every n ≤ 10^5 of p.N and every
// holding.
func runSaltedShares(o Options, r *report.Run, p attacksParams) ([]saltedShare, error) {
	t := report.NewTable("n", "S", "attacker's identities f", "groups held, spread", "groups held, concentrated", "into groups", "placing CPU s", "without the salt (ground)")
	var out []saltedShare
	price := math.Ldexp(1, p.Puzzles[0]) / p.Rate
	for k, n := range p.N {
		if n > 100_000 {
			continue
		}
		S := max(1, int(math.Round(p.Fraction*float64(n))))
		scheme, err := superpeer.Exact(S)
		if err != nil {
			return nil, err
		}
		for j, f := range p.Holdings {
			rng := rand.New(rand.NewSource(o.Seed*6151 + int64(k)*3571 + int64(j)))
			a := int(math.Round(f * float64(n)))
			honest := randomMembers(rng, scheme, n-a)
			row := saltedShare{N: n, S: S, Fraction: f, Unsalted: math.Min(1, float64(a)/float64(S))}
			salts := make([][32]byte, p.SaltTrials)
			for i := range salts {
				rng.Read(salts[i][:])
			}
			row.Spread = heldShare(scheme, honest, randomMembers(rng, scheme, a), salts)
			for G := S; G >= 1; G /= 2 {
				into, share := concentrated(rng, scheme, a, G)
				if got := heldShare(scheme, honest, into, salts); got > row.Concentrated || row.Groups == 0 {
					row.Concentrated, row.Groups = got, G
					row.GrindSeconds = float64(a) / share * price
				}
				if G == 1 {
					break
				}
			}
			t.Add(n, S, f, row.Spread, row.Concentrated, row.Groups, row.GrindSeconds, row.Unsalted)
			out = append(out, row)
		}
	}
	title := fmt.Sprintf("salted group keys: the share of the groups an attacker holding a fraction f of the identities (made before the salt) holds, over %d salts", p.SaltTrials)
	return out, printTable(o, r, "salted_shares", title, t)
}

// member is a key and its group.
type member struct {
	key   dht.Key
	group int
}

func randomMembers(rng *rand.Rand, scheme superpeer.Prefix, n int) []member {
	out := make([]member, n)
	for i := range out {
		rng.Read(out[i].key[:])
		out[i].group = scheme.Group(out[i].key)
	}
	return out
}

// concentrated is a keys ground into groups 0..G−1 in turn (random keys
// with the group's prefix), and the share of the key space those groups
// cover: one identity in them costs 1/share tries.
func concentrated(rng *rand.Rand, scheme superpeer.Prefix, a, G int) ([]member, float64) {
	share := 0.0
	for g := 0; g < G; g++ {
		share += scheme.Share(g)
	}
	out := make([]member, a)
	for i := range out {
		g := i % G
		depth := int(math.Round(-math.Log2(scheme.Share(g))))
		var k dht.Key
		rng.Read(k[:])
		prefix := scheme.GroupKey(g)
		for b := 0; b < depth; b++ {
			mask := byte(0x80) >> (b % 8)
			k[b/8] = k[b/8]&^mask | prefix[b/8]&mask
		}
		out[i] = member{k, scheme.Group(k)}
	}
	return out, share
}

// heldShare is the attacker's mean share of the occupied groups over the
// salts: a group is its when its member nearest the salted group key is
// one of the attacker's.
func heldShare(scheme superpeer.Prefix, honest, attacker []member, salts [][32]byte) float64 {
	G := scheme.Groups()
	total := 0.0
	best := make([]dht.Key, G)
	has := make([]int8, G) // 0 empty, 1 honest nearest, 2 attacker nearest
	keys := make([]dht.Key, G)
	for _, salt := range salts {
		s := scheme.Salted(salt)
		for g := range keys {
			keys[g], has[g] = s.GroupKey(g), 0
		}
		for side, ms := range [][]member{honest, attacker} {
			for _, m := range ms {
				if has[m.group] == 0 || keys[m.group].Closer(m.key, best[m.group]) {
					best[m.group], has[m.group] = m.key, int8(side+1)
				}
			}
		}
		held, occupied := 0, 0
		for _, h := range has {
			if h > 0 {
				occupied++
			}
			if h == 2 {
				held++
			}
		}
		total += float64(held) / float64(max(occupied, 1))
	}
	return total / float64(len(salts))
}
