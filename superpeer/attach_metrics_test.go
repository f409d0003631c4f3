package superpeer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

func checkMetrics(t *testing.T, g prometheus.Gatherer, want map[string]map[string]float64) {
	t.Helper()
	bad, err := counters.Mismatches(g, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

func TestAttachMetrics_RegisteredOnlyWhenAsked(t *testing.T) {
	hs := hosts(t, 4)
	regSP, regC := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	sp, err := NewAttach(hs[0], attachWith(attachOptions{Capacity: 2, Registerer: regSP}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	sp.SetRole(asRole(Superpeer, hs[0].ID()))
	// Three clients on one registry: their values add up.
	cs := attachAll(t, hs[1:], attachWith(attachOptions{Registerer: regC}))
	ctx := context.Background()
	for i, c := range cs[:2] {
		if ans, err := c.Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != Accepted {
			t.Fatalf("client %d: %+v, %v", i, ans, err)
		}
	}
	if ans, err := cs[2].Request(ctx, hs[0].ID(), false, nil, 0); err != nil || ans.Status != Full {
		t.Fatalf("third client: %+v, %v, want FULL", ans, err)
	}
	// With a regret beyond the margin it takes a served client's place.
	if ans, err := cs[2].RequestWith(ctx, hs[0].ID(), ClientRequest{Regret: 10 * time.Millisecond}); err != nil || ans.Status != Accepted {
		t.Fatalf("third client with regret: %+v, %v, want ACCEPTED", ans, err)
	}
	// A peer that is no superpeer refuses.
	if ans, err := cs[0].Request(ctx, hs[2].ID(), false, nil, 0); err != nil || ans.Status != NotSuperpeer {
		t.Fatalf("asking a client: %+v, %v, want NOT_SUPERPEER", ans, err)
	}
	// A bad frame is counted by reason.
	s, err := hs[3].NewStream(ctx, hs[0].ID(), defaultAttachID)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
	s.CloseWrite()
	s.Read(make([]byte, 1))
	s.Close()

	checkMetrics(t, regSP, map[string]map[string]float64{
		"superpeer_selector_role":              {"superpeer": 1, "client": 0, "unknown": 0},
		"superpeer_attach_clients":             {"": 2},
		"superpeer_attach_capacity":            {"": 2},
		"superpeer_attach_requests_total":      {"accepted": 3, "full": 1, "not_superpeer": 0},
		"superpeer_attach_displaced_total":     {"": 1},
		"superpeer_attach_requests_sent_total": {"": 0},
		"superpeer_attach_drops_total":         {dropAttachDecode: 1, dropAttachCoord: 0, dropAttachLost: 0},
	})
	checkMetrics(t, regC, map[string]map[string]float64{
		"superpeer_selector_role":              {"unknown": 3, "client": 0, "superpeer": 0},
		"superpeer_attach_clients":             {"": 0},
		"superpeer_attach_requests_total":      {"accepted": 0, "full": 0, "not_superpeer": 1},
		"superpeer_attach_requests_sent_total": {"": 5},
		"superpeer_attach_drops_total":         {dropAttachDecode: 0},
	})

	// The role follows SetRole, or ReportRole where a selector sets it.
	cs[0].SetRole(asRole(Client, hs[0].ID()))
	cs[1].SetRole(asRole(Superpeer, hs[2].ID()))
	cs[1].ReportRole(func() Role { return Client })
	checkMetrics(t, regC, map[string]map[string]float64{
		"superpeer_selector_role": {"unknown": 1, "client": 2, "superpeer": 0},
	})

	for _, c := range cs {
		c.Close()
	}
	if mfs, err := regC.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after Close: %d families (%v), want none", len(mfs), err)
	}

	// Without a Registerer nothing is registered, not even on the default
	// registry.
	a := attachAll(t, hs[1:2])[0]
	if ans, err := a.Request(ctx, hs[0].ID(), true, nil, 0); err != nil || ans.Status != Accepted {
		t.Fatalf("leave: %+v, %v", ans, err)
	}
	if names, err := counters.Named(prometheus.DefaultGatherer, "superpeer_"); err != nil || len(names) > 0 {
		t.Errorf("registered on the default registry without a Registerer: %v (%v)", names, err)
	}
}
