package exp

import (
	"encoding/json"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/flood"
)

// attacks writes attacks.floods: every kind without and with the
// defences, each with frames sent, the honest clients' renewals all
// accepted and still served afterwards (but for silent streams without
// the defences); garbage and oversized frames
// dropped as decode (or Vivaldi's oversize), the useless frames past the
// per-peer rate dropped as rate (census-rate) with the defences and never
// without, and the defences cutting the survey reports reflected.
func TestAttacks_Floods(t *testing.T) {
	raw := runTiny(t, "attacks", 1, "floods.csv")
	var res struct {
		Params struct {
			Floods floodParams `json:"floods"`
		} `json:"params"`
		Results struct {
			Attacks struct {
				Floods []flood.Result `json:"floods"`
			} `json:"attacks"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	rows := res.Results.Attacks.Floods
	if len(rows) != 2*len(flood.Kinds) || len(res.Params.Floods.Kinds) != len(flood.Kinds) {
		t.Fatalf("%d flood rows, want %d", len(rows), 2*len(flood.Kinds))
	}
	by := map[bool]map[flood.Kind]flood.Result{false: {}, true: {}}
	for k, r := range rows {
		if r.Defences != (k >= len(flood.Kinds)) || r.Kind != flood.Kinds[k%len(flood.Kinds)] {
			t.Fatalf("row %d: %s defences %v", k, r.Kind, r.Defences)
		}
		by[r.Defences][r.Kind] = r
		// Silent streams from one peer fill go-libp2p's transient scope
		// unless the per-peer limit keeps it below: without the defences
		// renewals may fail, and leases lapse.
		mayFail := r.Kind == flood.Silent && !r.Defences
		if r.Kind == flood.Forge && !r.Defences {
			// Without the guard the first forgery takes the token
			// (TestRun_Forge).
			if r.Fenced == 0 {
				t.Errorf("forge without defences: never fenced")
			}
			continue
		}
		if r.FramesSent == 0 || (!r.RenewalsOK || !r.StillServing) && !mayFail || r.Renewals == 0 || r.PeakHeap == 0 {
			t.Errorf("%s (defences %v): %d frames, renewals %d of which %d failed, still serving %v, heap %d",
				r.Kind, r.Defences, r.FramesSent, r.Renewals, r.RenewalsFailed, r.StillServing, r.PeakHeap)
		}
		if !r.Defences && (r.Dropped["rate"] > 0 || r.Dropped["census-rate"] > 0) {
			t.Errorf("%s without defences: rate drops %v", r.Kind, r.Dropped)
		}
	}
	for _, def := range []bool{false, true} {
		if d := by[def][flood.Garbage].Dropped; d["decode"] == 0 {
			t.Errorf("garbage (defences %v): dropped %v, want decode", def, d)
		}
		if d := by[def][flood.Oversized].Dropped; d["decode"] == 0 || (!def && d["oversize"] == 0) {
			t.Errorf("oversized (defences %v): dropped %v, want decode and oversize", def, d)
		}
	}
	for k, reason := range map[flood.Kind]string{flood.AttachChurn: "rate", flood.Survey: "rate", flood.Move: "rate", flood.Probe: "rate", flood.Census: "census-rate"} {
		if d := by[true][k].Dropped; d[reason] == 0 {
			t.Errorf("%s with defences: dropped %v, want %s", k, d, reason)
		}
	}
	if f := by[true][flood.Forge]; !f.StillHolding || f.Fenced != 0 || f.Untraced == 0 {
		t.Errorf("forge with defences: holding %v, fenced %d, untraced %d", f.StillHolding, f.Fenced, f.Untraced)
	}
	if off, on := by[false][flood.Survey].Reflected, by[true][flood.Survey].Reflected; off == 0 || on >= off {
		t.Errorf("survey reports reflected: %d without defences, %d with", off, on)
	}
}
