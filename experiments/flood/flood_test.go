package flood

import (
	"context"
	"testing"
	"time"
)

func TestParseKind(t *testing.T) {
	for _, k := range Kinds {
		if got, err := ParseKind(string(k)); err != nil || got != k {
			t.Errorf("%s: %v, %v", k, got, err)
		}
	}
	if _, err := ParseKind("nope"); err == nil {
		t.Error("an unknown kind parsed")
	}
}

// Attach churn against a defended victim: the frames past the rate are
// dropped as rate, the protocol-peer limit refuses streams past 4 at once,
// and the honest clients' renewals all pass.
func TestRun_AttachChurn(t *testing.T) {
	rs, err := Run(context.Background(), Config{Kinds: []Kind{AttachChurn}, Duration: 500 * time.Millisecond, Settle: 200 * time.Millisecond, Defences: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.FramesSent == 0 || r.Dropped["rate"] == 0 || !r.RenewalsOK || !r.StillServing || r.Victim != "repel" {
		t.Fatalf("%+v", r)
	}
	if got := r.Dropped["rate"] + r.RcmgrRefused["protocol-peer"]; got > r.FramesSent {
		t.Errorf("%d dropped or refused of %d sent", got, r.FramesSent)
	}
}

// Forged announcements of the victim's token on TCP loopback: without the
// defences the victim loses its token to the attacker (it mints it again
// once the forger's version has been silent for DeadAfter); with them (the
// guard) it refuses every one, keeps its token and keeps serving.
func TestRun_Forge(t *testing.T) {
	for _, def := range []bool{false, true} {
		rs, err := Run(context.Background(), Config{Kinds: []Kind{Forge}, Duration: 500 * time.Millisecond, Settle: 200 * time.Millisecond, Defences: def, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		t.Logf("defences %v: %d frames, holding %v, fenced %d, untraced %d, renewals %d/%d, serving %v",
			def, r.FramesSent, r.StillHolding, r.Fenced, r.Untraced, r.Renewals-r.RenewalsFailed, r.Renewals, r.StillServing)
		if r.FramesSent == 0 {
			t.Fatalf("nothing sent: %+v", r)
		}
		if !def {
			if r.Fenced == 0 {
				t.Fatalf("the unguarded victim kept its token: %+v", r)
			}
			continue
		}
		if !r.StillHolding || r.Fenced != 0 || r.Untraced == 0 || !r.RenewalsOK || !r.StillServing {
			t.Fatalf("the guarded victim: %+v", r)
		}
	}
}
