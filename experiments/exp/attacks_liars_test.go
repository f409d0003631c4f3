package exp

import (
	"encoding/json"
	"testing"
)

// attacks writes attacks.liars: the clean runs and 30% deflation liars
// without and with the defence, the opt-in outlier test included (tiny:
// n = 120). Without it the honest
// peers' median error grows well past the clean run's; with it the error
// is lower than without, the liars' samples are refused, the defence
// costs the clean run less than 10%, and every row has its ratios and
// token share.
func TestAttacks_Liars(t *testing.T) {
	raw := runTiny(t, "attacks", 1, "liars.csv")
	var res struct {
		Params struct {
			Liars liarsParams `json:"liars"`
		} `json:"params"`
		Results struct {
			Attacks struct {
				Liars []liarsRow `json:"liars"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	rows := res.Results.Attacks.Liars
	type key struct {
		kind    string
		defence bool
	}
	by := map[key]liarsRow{}
	for _, r := range rows {
		by[key{r.Kind, r.Defence}] = r
		if r.OutlierTest != r.Defence {
			t.Errorf("%s: defence %v, outlier test %v (tiny runs none and default+outlier)", r.Kind, r.Defence, r.OutlierTest)
		}
		if r.HonestMedianError <= 0 || r.ClientRTTRatio <= 0 || r.LiarTokenShare < 0 || r.LiarTokenShare > 1 || len(r.PerSeed) != 1 {
			t.Errorf("%s (defence %v): %+v", r.Kind, r.Defence, r)
		}
	}
	if len(rows) != 4 || res.Params.Liars.Defence["TriangleMargin"] <= 0 {
		t.Fatalf("%d rows, params %+v", len(rows), res.Params.Liars)
	}
	clean, cleanDef := by[key{"none", false}], by[key{"none", true}]
	off, on := by[key{"deflation", false}], by[key{"deflation", true}]
	if clean.HonestMedianErrorRatio != 1 || cleanDef.HonestMedianErrorRatio > 1.1 {
		t.Errorf("the defence costs the clean run: error ×%.3f", cleanDef.HonestMedianErrorRatio)
	}
	if off.Fraction != 0.3 || off.HonestMedianErrorRatio < 1.5 || off.LiarSamplesRefused != 0 {
		t.Errorf("30%% deflation without the defence: error ×%.3f, %.3f of liar samples refused", off.HonestMedianErrorRatio, off.LiarSamplesRefused)
	}
	if on.HonestMedianError >= off.HonestMedianError || on.LiarSamplesRefused <= 0 {
		t.Errorf("with the defence: error %.4f (without %.4f), %.3f of liar samples refused", on.HonestMedianError, off.HonestMedianError, on.LiarSamplesRefused)
	}
	t.Logf("30%% deflation: honest error ×%.2f without the defence, ×%.2f with; client RTT ×%.2f, ×%.2f; liar tokens %.2f, %.2f",
		off.HonestMedianErrorRatio, on.HonestMedianErrorRatio, off.ClientRTTRatio, on.ClientRTTRatio, off.LiarTokenShare, on.LiarTokenShare)
}
