package sim

import (
	randv2 "math/rand/v2"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// A holder's probe (repel.Config.SiteRTT) is answered with the true RTT of
// the latency space, one RTT later, whatever the coordinates predict.
func TestRepelSim_ProbeMeasuresTrueRTT(t *testing.T) {
	ids := []string{"a", "b", "c"}
	cfg := repel.DefaultConfig()
	cfg.Tokens = 2
	s := &repelSim{
		o: RepelOptions{RTT: tri(), IDs: ids, Config: cfg}, net: NewNet(tri()),
		index: map[string]int{"a": 0, "b": 1, "c": 2}, nodes: make([]*repel.Node, 3), res: &RepelResult{},
	}
	nd, err := repel.NewNode("a", repel.PeerKey("a"), cfg, randv2.New(randv2.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	nd.SetCoord(vivaldi.Coord{Vec: []float64{0, 0}})
	s.nodes[0] = nd
	s.probe(0, "c")
	s.net.RunUntil(39 * time.Millisecond)
	if _, ok := nd.MeasuredRTT(s.now(), "c"); ok {
		t.Fatal("the probe was answered before one RTT")
	}
	s.net.RunUntil(time.Second)
	if rtt, ok := nd.MeasuredRTT(s.now(), "c"); !ok || rtt != 40*time.Millisecond || s.res.Probes != 1 {
		t.Fatalf("measured %v (%v), %d probes; want the true 40 ms, 1 probe", rtt, ok, s.res.Probes)
	}
}

// In a run every holder measures the other holders and its clients; with
// ProbeTTL 0 none measures anything, and with SiteRTT 0 no token moves for
// sharing a site.
func TestSimulateRepel_HolderProbes(t *testing.T) {
	r := repelRun(t, 9)
	if r.Probes < 6*5+200-6 {
		t.Fatalf("%d probes for 6 tokens and 200 peers, want every holder to measure the other 5 and every client measured", r.Probes)
	}
	off, _ := repelRunWith(t, 9, func(o *RepelOptions) { o.Config.SiteRTT, o.Config.ProbeTTL, o.Config.SurveyInterval = 0, 0, 0 })
	if off.Probes != 0 || off.Events[repel.EventSiteShared.String()] != 0 {
		t.Fatalf("ProbeTTL 0: %d probes, events %v", off.Probes, off.Events)
	}
	noSite, _ := repelRunWith(t, 9, func(o *RepelOptions) { o.Config.SiteRTT = 0 })
	if noSite.Probes == 0 || noSite.Events[repel.EventSiteShared.String()] != 0 {
		t.Fatalf("SiteRTT 0: %d probes, events %v", noSite.Probes, noSite.Events)
	}
}

// Surveys: every holder of a settled run has had its place measured (a
// survey that kept it), candidates measured clients for them, the places
// were kept after the tokens settled, and the clients' true mean RTT is
// lower than with surveys off.
func TestSimulateRepel_SurveysMeasurePlaces(t *testing.T) {
	rtt := planetlab(t, 200, 3)
	on, _ := repelRunWith(t, 9, func(*RepelOptions) {})
	off, _ := repelRunWith(t, 9, func(o *RepelOptions) { o.Config.SurveyInterval = 0 })
	if !on.Settled || len(on.Superpeers) != 6 || on.StepErrors != 0 {
		t.Fatalf("surveys on: settled %v, %d holders, %d refused messages", on.Settled, len(on.Superpeers), on.StepErrors)
	}
	if on.Events[repel.EventSurveyKept.String()] < 6 || on.Messages[repel.MsgSurvey.String()] == 0 ||
		on.Messages[repel.MsgSurveyReport.String()] != on.Messages[repel.MsgSurvey.String()] {
		t.Fatalf("events %v, messages %v: want every holder's place kept by a survey and every survey reported", on.Events, on.Messages)
	}
	if off.Events[repel.EventSurvey.String()] != 0 || off.Messages[repel.MsgSurvey.String()] != 0 {
		t.Fatalf("surveys off: events %v", off.Events)
	}
	// The places are kept only after the tokens settle: with surveys the
	// run converges after its last settling, and the run ends after both;
	// without, the two are one.
	if on.SurveyedSeconds <= on.SettledSeconds || on.VirtualSeconds < on.SurveyedSeconds {
		t.Fatalf("surveys on: settled at %.1f s, surveyed at %.1f s, run ended at %.1f s", on.SettledSeconds, on.SurveyedSeconds, on.VirtualSeconds)
	}
	if off.SurveyedSeconds != off.SettledSeconds {
		t.Fatalf("surveys off: settled at %.1f s, surveyed at %.1f s", off.SettledSeconds, off.SurveyedSeconds)
	}
	mean := func(a []int) float64 {
		var s float64
		k := 0
		for i, x := range a {
			if x >= 0 && x != i {
				s += rtt.RTT(i, x)
				k++
			}
		}
		return s / float64(k)
	}
	if m1, m0 := mean(on.Assignment), mean(off.Assignment); m1 >= m0 {
		t.Fatalf("mean client RTT %.2f ms with surveys, %.2f without", m1, m0)
	} else {
		t.Logf("mean client RTT %.2f ms with surveys (%d moved), %.2f without", m1, on.Events[repel.EventSurveyMoved.String()], m0)
	}
}
