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
