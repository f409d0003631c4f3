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
				Grinding []grindRow `json:"grinding"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	rows := res.Results.Attacks.Grinding
	if len(rows) != 2 || res.Params.Rate <= 0 {
		t.Fatalf("%d rows, rate %v", len(rows), res.Params.Rate)
	}
	for _, r := range rows {
		if r.Tries < 1 || r.TriesMax < r.Tries || math.Abs(r.Seconds-r.Tries/res.Params.Rate) > 1e-9*r.Seconds {
			t.Errorf("n %d: tries %v (max %v), %v s", r.N, r.Tries, r.TriesMax, r.Seconds)
		}
		if len(r.Take) != 1 || r.Take[0].Tries < math.Ceil(0.5*float64(r.S)) {
			t.Errorf("n %d: half of %d groups in %v tries", r.N, r.S, r.Take)
		}
	}
}
