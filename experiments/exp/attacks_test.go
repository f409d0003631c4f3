package exp

import (
	"encoding/json"
	"math"
	"testing"
)

// attacks writes the grinding table, figure and results: per n the tries
// to take a chosen group and half of all groups, at least one key per
// group taken, and a positive derivation rate.
func TestAttacks_Grinding(t *testing.T) {
	raw := runTiny(t, "attacks", 3, "grinding.csv", "grinding.png")
	var res struct {
		Params struct {
			Rate float64 `json:"identities_per_core_second"`
		} `json:"params"`
		Results struct {
			Attacks struct {
				Grinding []grindRow    `json:"grinding"`
				Salted   []saltedShare `json:"salted_shares"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	rows := res.Results.Attacks.Grinding
	if len(rows) != 4 || res.Params.Rate <= 0 {
		t.Fatalf("%d rows, rate %v", len(rows), res.Params.Rate)
	}
	// The defence rows (puzzle 4 + salt) price the same tries at 2^4
	// derivations each; an honest identity was measured.
	for i, d := range rows[2:] {
		r := rows[i]
		if !d.Defence || d.Puzzle != 4 || d.N != r.N || math.Abs(d.CaptureGroupSeconds-16*r.CaptureGroupSeconds) > 1e-9*d.Seconds ||
			math.Abs(d.CaptureFractionSeconds["0.5"]-16*r.CaptureFractionSeconds["0.5"]) > 1e-9*d.Seconds {
			t.Errorf("defence row %+v against %+v", d, r)
		}
		if !d.HonestMeasured || d.HonestJoinSeconds <= 0 || d.GroupsPerCoreEpoch <= 0 {
			t.Errorf("defence row: honest join %v s (measured %v), %v groups a core-epoch", d.HonestJoinSeconds, d.HonestMeasured, d.GroupsPerCoreEpoch)
		}
	}
	// Identities made before the salt hold about their share of the
	// groups, however they were placed; ground to the unsalted keys they
	// would hold every group they reach.
	if len(res.Results.Attacks.Salted) != 2 {
		t.Fatalf("salted shares: %+v", res.Results.Attacks.Salted)
	}
	for _, s := range res.Results.Attacks.Salted {
		if math.Abs(s.Spread-s.Fraction) > 0.15 || s.Concentrated > s.Fraction+0.15 || s.Groups < 1 || s.Groups > s.S ||
			s.Unsalted != math.Min(1, s.Fraction*float64(s.N)/float64(s.S)) {
			t.Errorf("salted shares at n %d: %+v", s.N, s)
		}
	}
	for _, r := range rows[:2] {
		if r.Tries < 1 || r.TriesMax < r.Tries || math.Abs(r.Seconds-r.Tries/res.Params.Rate) > 1e-9*r.Seconds {
			t.Errorf("n %d: tries %v (max %v), %v s", r.N, r.Tries, r.TriesMax, r.Seconds)
		}
		if len(r.Take) != 1 || r.Take[0].Tries < math.Ceil(0.5*float64(r.S)) {
			t.Errorf("n %d: half of %d groups in %v tries", r.N, r.S, r.Take)
		}
	}
}

// attacks measures a new salt live: the swarm settles again on exactly the
// superpeers the new keys call for, every client with a superpeer; the
// cost is counted (a changed group re-attaches clients; the change sends
// requests beyond the settled rate).
func TestAttacks_SaltChange(t *testing.T) {
	raw := runTiny(t, "attacks", 3, "salt_changes.csv", "salt_changes.png")
	var res struct {
		Results struct {
			Attacks struct {
				Changes []saltChange `json:"salt_changes"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Results.Attacks.Changes) != 1 {
		t.Fatalf("salt changes: %+v", res.Results.Attacks.Changes)
	}
	c := res.Results.Attacks.Changes[0]
	t.Logf("salt change: %+v", c)
	if !c.Correct || c.Clients != c.N-c.S || c.SettleSeconds <= 0 || c.SteadyRate <= 0 || c.ChangeRate <= 0 {
		t.Errorf("salt change: %+v", c)
	}
	// Each moved group's clients (all but those that land on the new
	// superpeer being themselves the old one, at most one a group) re-attach.
	if c.GroupsMoved > 0 && c.Reattached < c.GroupsMoved {
		t.Errorf("%d groups moved but %d clients re-attached", c.GroupsMoved, c.Reattached)
	}
	if c.MaxUnservedSeconds > c.SettleSeconds+0.5 || c.UnservedClientSeconds < c.MaxUnservedSeconds {
		t.Errorf("unserved: longest %v s, %v client-s, settle %v s", c.MaxUnservedSeconds, c.UnservedClientSeconds, c.SettleSeconds)
	}
}
