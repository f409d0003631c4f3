package exp

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/report"
)

// attacks writes attacks.survey_liars and attacks.regret_liars (tiny:
// n = 200, S = 6, 10% liars, the regret rows at the tight capacity).
// Without the defence the survey liars hold more than their share of the
// tokens and the regret liars come nearer their holders than the truth
// would bring them; with it the survey liars' reports are refused (and no
// honest one), they hold fewer tokens, the regret liars gain less, and the
// defence costs the clean run's clients less than 5%.
func TestAttacks_ReportLiars(t *testing.T) {
	raw := runTiny(t, "attacks", 1, "survey_liars.csv", "regret_liars.csv")
	var res struct {
		Params struct {
			Reports reportParams `json:"report_liars"`
		} `json:"params"`
		Results struct {
			Attacks struct {
				Survey []surveyLiarRow `json:"survey_liars"`
				Regret []regretLiarRow `json:"regret_liars"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	p, sr, rr := res.Params.Reports, res.Results.Attacks.Survey, res.Results.Attacks.Regret
	if len(sr) != 4 || len(rr) != 4 || p.Defence["SurveyCheck"] <= 0 || p.Defence["RegretFactor"] <= 0 {
		t.Fatalf("%d survey rows, %d regret rows, params %+v", len(sr), len(rr), p)
	}
	survey := map[[2]bool]surveyLiarRow{} // liars, defence
	for _, r := range sr {
		survey[[2]bool{r.Fraction > 0, r.Defence}] = r
		if len(r.PerSeed) != 1 || r.ClientRTT <= 0 || r.ReportsRefusedHonest != 0 {
			t.Errorf("survey row %s (defence %v): %+v", r.Liars, r.Defence, r)
		}
	}
	if c := survey[[2]bool{false, true}]; c.ClientRTTRatio > 1.05 {
		t.Errorf("the defence costs the clean run's clients ×%.3f", c.ClientRTTRatio)
	}
	off, on := survey[[2]bool{true, false}], survey[[2]bool{true, true}]
	if off.LiarTokenShare <= 1.5*off.LiarPeerShare || off.SurveyOffersToLiars == 0 || off.ReportsRefusedLiars != 0 {
		t.Errorf("survey liars without the defence: %.2f of the tokens for %.2f of the peers, %v offers, %v refused",
			off.LiarTokenShare, off.LiarPeerShare, off.SurveyOffersToLiars, off.ReportsRefusedLiars)
	}
	if on.LiarTokenShare >= off.LiarTokenShare || on.ReportsRefusedLiars == 0 {
		t.Errorf("survey liars with the defence: %.2f of the tokens (%.2f without), %v reports refused", on.LiarTokenShare, off.LiarTokenShare, on.ReportsRefusedLiars)
	}
	regret := map[[2]bool]regretLiarRow{}
	for _, r := range rr {
		regret[[2]bool{r.Fraction > 0, r.Defence}] = r
		if r.Capacity != p.TightC || r.HonestRTT <= 0 || (r.Capped > 0) != r.Defence {
			t.Errorf("regret row %s (defence %v): %+v", r.Liars, r.Defence, r)
		}
	}
	roff, ron := regret[[2]bool{true, false}], regret[[2]bool{true, true}]
	if roff.LiarRTTRatio <= 0 || roff.LiarRTTRatio > 0.9 || ron.LiarRTTRatio <= roff.LiarRTTRatio {
		t.Errorf("regret liars' RTT × %.3f without the defence, × %.3f with", roff.LiarRTTRatio, ron.LiarRTTRatio)
	}
	t.Logf("survey liars: %.2f of the tokens without the defence, %.2f with; regret liars' RTT ×%.2f without, ×%.2f with",
		off.LiarTokenShare, on.LiarTokenShare, roff.LiarRTTRatio, ron.LiarRTTRatio)
}

// The survey- and regret-liar part of a full `peer experiment attacks`
// run (seeds from ATTACKS_REPORTS_SEED, default 1, and the next two),
// alone: ATTACKS_REPORTS=1 go test ./experiments/exp -run
// TestAttacks_ReportLiarsFull -v (the tables on stdout, the run under
// ATTACKS_REPORTS_OUT, default a temporary directory).
func TestAttacks_ReportLiarsFull(t *testing.T) {
	if os.Getenv("ATTACKS_REPORTS") == "" {
		t.Skip("ATTACKS_REPORTS=1 runs the full survey- and regret-liar tables")
	}
	out := os.Getenv("ATTACKS_REPORTS_OUT")
	if out == "" {
		out = t.TempDir()
	}
	seed := int64(1)
	if s := os.Getenv("ATTACKS_REPORTS_SEED"); s != "" {
		if err := json.Unmarshal([]byte(s), &seed); err != nil {
			t.Fatal(err)
		}
	}
	r, err := report.New(out, "attacks", "report-liars-full")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Seed: seed, Stdout: os.Stdout, Stderr: os.Stderr}
	p, sr, rr, err := runReportLiars(o, r)
	if err != nil {
		t.Fatal(err)
	}
	params := struct {
		common
		Reports reportParams `json:"report_liars"`
	}{commonOf(o), p}
	if err := r.WriteResults(params, map[string]any{"attacks": map[string]any{"survey_liars": sr, "regret_liars": rr}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", r.Dir)
}
