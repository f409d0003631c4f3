package repel

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// exploreAll runs the chooser's exploring loop (after asking) with the RTTs
// given (ms).
func exploreAll(ch *Chooser, now time.Time, cands []Candidate, rtt map[string]float64) []string {
	var asked []string
	for id := ch.Explore(now, cands); id != ""; id = ch.Explore(now, cands) {
		asked = append(asked, id)
		d, ok := rtt[id]
		ch.Explored(now, id, time.Duration(d*float64(time.Millisecond)), ok)
	}
	return asked
}

// measureAll runs the chooser's measuring loop with the RTTs given (ms).
func measureAll(ch *Chooser, now time.Time, cur string, cands []Candidate, rtt map[string]float64) []string {
	var asked []string
	for id := ch.Next(now, cur, cands); id != ""; id = ch.Next(now, cur, cands) {
		asked = append(asked, id)
		d, ok := rtt[id]
		ch.Measured(now, id, time.Duration(d*float64(time.Millisecond)), ok)
	}
	return asked
}

func TestChooser_MeasuresUntilTheFirstProbeAreMeasured(t *testing.T) {
	ch, err := NewChooser(DefaultAttachConfig())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	// Predicted 10, 20, 30, 40, 50 ms; true 60, 70, 80, 15, 55.
	cands := []Candidate{{"a", 0.010}, {"b", 0.020}, {"c", 0.030}, {"d", 0.040}, {"e", 0.050}}
	rtt := map[string]float64{"a": 60, "b": 70, "c": 80, "d": 15, "e": 55}
	// a, b, c first; then d (40 predicted) and e (50) rank among the first
	// three unmeasured, and are measured too.
	if got := measureAll(ch, t0, "", cands, rtt); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("measured %v", got)
	}
	if got := ch.order(t0, "", cands); !slices.Equal(got, []string{"d", "e", "a", "b", "c"}) {
		t.Fatalf("order %v", got)
	}
	// Attached to d, a renewal measures nothing and keeps d.
	t1 := t0.Add(10 * time.Second)
	if got := measureAll(ch, t1, "d", cands, rtt); len(got) != 0 {
		t.Fatalf("renewal measured %v", got)
	}
	if got := ch.order(t1, "d", cands); got[0] != "d" {
		t.Fatalf("renewal order %v", got)
	}
}

func TestChooser_BoundsMeasurementsPerChoice(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.Probe = 2
	ch, _ := NewChooser(cfg)
	var cands []Candidate
	rtt := map[string]float64{}
	for i, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		cands = append(cands, Candidate{id, float64(i+1) / 1000})
		rtt[id] = 500 // every prediction far too low
	}
	if got := measureAll(ch, time.Unix(0, 0), "", cands, rtt); len(got) != 2*cfg.Probe {
		t.Fatalf("measured %v, want 2·Probe = %d", got, 2*cfg.Probe)
	}
}

// A holder the coordinates place far but that is near (a near pair the
// embedding gets wrong) is never among the first Probe of the ranking:
// without Explore the client never measures it. With Explore 1 it measures
// one more unmeasured holder after each step's requests, nearest predicted
// first, and attaches to it at the step after it measured it. Exploring
// counts neither as a probe nor toward the probes' pacing.
func TestChooser_ExploresTheHoldersItHasNotMeasured(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var cands []Candidate
	rtt := map[string]float64{}
	for i, id := range ids {
		cands = append(cands, Candidate{id, float64(10*(i+1)) / 1000}) // predicted 10 … 80 ms
		rtt[id] = 5
	}
	rtt["h"] = 1 // predicted 80 ms, truly 1 ms
	for _, explore := range []int{0, 1} {
		cfg := DefaultAttachConfig()
		cfg.Explore, cfg.ExploreEvery = explore, 0 // every step
		ch, _ := NewChooser(cfg)
		t0 := time.Unix(0, 0)
		cur := ""
		var found int
		for step := 0; step < 10; step++ {
			now := t0.Add(time.Duration(step) * 10 * time.Second)
			probed := measureAll(ch, now, cur, cands, rtt)
			if want := map[bool]int{true: cfg.Probe}[step == 0]; len(probed) != want {
				t.Fatalf("explore %d, step %d: probed %v, want %d (choosing anew only)", explore, step, probed, want)
			}
			cur = ch.order(now, cur, cands)[0]
			if cur == "h" && found == 0 {
				found = step
			}
			explored := exploreAll(ch, now, cands, rtt)
			want := 0
			if step < len(ids)-cfg.Probe { // until every holder is measured
				want = explore
			}
			if len(explored) != want {
				t.Fatalf("explore %d, step %d: explored %v, want %d", explore, step, explored, want)
			}
		}
		switch {
		case explore == 0 && found != 0:
			t.Fatalf("without Explore the client chose h at step %d", found)
		case explore == 1 && found != len(ids)-cfg.Probe:
			// a, b, c probed at step 0; d … h explored after steps 0 … 4.
			t.Fatalf("with Explore 1 the client chose h at step %d, want %d", found, len(ids)-cfg.Probe)
		}
	}
}

// ExploreEvery spaces the steps that explore.
func TestChooser_ExploreEvery(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.Probe, cfg.Explore, cfg.ExploreEvery = 0, 1, 30*time.Second
	ch, _ := NewChooser(cfg)
	var cands []Candidate
	rtt := map[string]float64{}
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		cands = append(cands, Candidate{id, float64(i+1) / 1000})
		rtt[id] = float64(i + 1)
	}
	var got []string
	t0 := time.Unix(0, 0)
	for step := 0; step < 10; step++ { // every 10 s: explores at 0, 30, 60, 90 s
		got = append(got, exploreAll(ch, t0.Add(time.Duration(step)*10*time.Second), cands, rtt)...)
	}
	if !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("explored %v, want a … d, one every 30 s", got)
	}
}

// ExploreFirst lifts ExploreEvery until the client has measured that many
// holders: here it explores at every 10 s step until it knows three, then
// every 30 s again.
func TestChooser_ExploreFirst(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.Probe, cfg.Explore, cfg.ExploreEvery, cfg.ExploreFirst = 0, 1, 30*time.Second, 3
	ch, _ := NewChooser(cfg)
	var cands []Candidate
	rtt := map[string]float64{}
	for i, id := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		cands = append(cands, Candidate{id, float64(i+1) / 1000})
		rtt[id] = float64(i + 1)
	}
	var got []string
	t0 := time.Unix(0, 0)
	for step := 0; step < 10; step++ { // every 10 s: explores at 0, 10, 20, then 50, 80 s
		got = append(got, exploreAll(ch, t0.Add(time.Duration(step)*10*time.Second), cands, rtt)...)
	}
	if !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("explored %v, want a, b, c at once, then d and e 30 s apart", got)
	}
	bad := DefaultAttachConfig()
	bad.ExploreFirst = -1
	if _, err := NewChooser(bad); err == nil {
		t.Fatal("ExploreFirst -1 accepted")
	}
}

// A failed measurement ranks the holder last, but only until ProbeEvery:
// a holder that timed out once on a loaded host is measured again.
func TestChooser_MeasuresAFailedHolderAgain(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.Probe, cfg.Explore, cfg.ProbeEvery = 1, 0, time.Minute
	ch, _ := NewChooser(cfg)
	t0 := time.Unix(0, 0)
	cands := []Candidate{{"a", 0.005}, {"b", 0.020}}
	if got := measureAll(ch, t0, "", cands, map[string]float64{"b": 20}); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("measured %v", got) // a failed (no RTT given), so b ranked first and was measured
	}
	if got := ch.order(t0, "", cands); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("order %v", got)
	}
	t1 := t0.Add(cfg.ProbeEvery)
	if got := measureAll(ch, t1, "b", cands, map[string]float64{"a": 5, "b": 20}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after ProbeEvery measured %v, want a again", got)
	}
	if got := ch.order(t1, "b", cands); got[0] != "a" {
		t.Fatalf("order %v, want a first", got)
	}
}

// The old selector probed when choosing anew but kept its holder by
// prediction alone, so a client that had chosen a holder for its measured
// RTT went back to the predicted-nearest at its next renewal. The chooser
// keeps it.
func TestChooser_KeepsAMeasuredChoice(t *testing.T) {
	ch, _ := NewChooser(DefaultAttachConfig())
	t0 := time.Unix(0, 0)
	cands := []Candidate{{"a", 0.010}, {"b", 0.012}, {"c", 0.030}}
	rtt := map[string]float64{"a": 40, "b": 35, "c": 12}
	measureAll(ch, t0, "", cands, rtt)
	if got := ch.order(t0, "", cands)[0]; got != "c" {
		t.Fatalf("chose %s, want c", got)
	}
	for k := 1; k <= 100; k++ {
		now := t0.Add(time.Duration(k) * 10 * time.Second)
		ch.Observed(now, "c", 12*time.Millisecond) // the exchange after each renewal
		measureAll(ch, now, "c", cands, rtt)
		if got := ch.order(now, "c", cands)[0]; got != "c" {
			t.Fatalf("renewal %d: order starts with %s, want c", k, got)
		}
	}
}

func TestChooser_SwitchAndRateLimit(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.ProbeEvery, cfg.Explore = time.Minute, 0 // the probes' pacing alone
	ch, _ := NewChooser(cfg)
	t0 := time.Unix(0, 0)
	cands := []Candidate{{"a", 0.020}, {"b", 0.021}}
	rtt := map[string]float64{"a": 20, "b": 21, "n": 30}
	measureAll(ch, t0, "", cands, rtt)
	// b is within 10% of a: an attached client stays with b.
	if got := ch.order(t0, "b", cands); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("order %v", got)
	}
	// A new holder predicted at 5 ms: not measured before ProbeEvery has
	// passed, and ranked by its prediction meanwhile.
	cands = append(cands, Candidate{"n", 0.005})
	t1 := t0.Add(30 * time.Second)
	if got := measureAll(ch, t1, "b", cands, rtt); len(got) != 0 {
		t.Fatalf("measured %v within ProbeEvery", got)
	}
	if got := ch.order(t1, "b", cands); got[0] != "n" {
		t.Fatalf("order %v", got)
	}
	// After ProbeEvery it is measured (30 ms) and the client stays with b.
	t2 := t0.Add(time.Minute)
	if got := measureAll(ch, t2, "b", cands, rtt); !slices.Equal(got, []string{"n"}) {
		t.Fatalf("measured %v", got)
	}
	if got := ch.order(t2, "b", cands); !slices.Equal(got, []string{"b", "a", "n"}) {
		t.Fatalf("order %v", got)
	}
	// A client whose holder is gone measures at once.
	cands = append(cands, Candidate{"m", 0.001})
	if got := measureAll(ch, t2.Add(time.Second), "gone", cands, map[string]float64{"m": 1}); !slices.Equal(got, []string{"m"}) {
		t.Fatalf("measured %v", got)
	}
	// Measurements expire after MeasureTTL and holders gone are forgotten.
	ch.Next(t2.Add(cfg.MeasureTTL), "", cands[:1])
	if len(ch.measured) != 0 {
		t.Fatalf("measurements kept: %v", ch.measured)
	}
}

// A client's regret for the k-th holder of its order is the next one's RTT
// minus the k-th's: negative when it stays within Switch of a nearer
// holder, none when the next RTT is unknown, noOtherChoice for the last
// holder or after a failed measurement.
func TestRegret(t *testing.T) {
	order := []Choice{{"cur", 0.012, true}, {"a", 0.010, true}, {"b", 0.015, false}, {"c", math.Inf(1), true}, {"d", math.NaN(), false}}
	for k, want := range []time.Duration{-2 * time.Millisecond, 5 * time.Millisecond, noOtherChoice, 0, noOtherChoice} {
		if got := Regret(order, k); got != want {
			t.Errorf("Regret(order, %d) = %v, want %v", k, got, want)
		}
	}
	if got := Regret(nil, 0); got != noOtherChoice {
		t.Errorf("Regret of an empty order = %v", got)
	}
}

// An attached client's holder measurement is due when it has none, and
// again ProbeEvery after the last (a probe or an observed sample).
func TestChooser_Due(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.ProbeEvery = time.Minute
	ch, _ := NewChooser(cfg)
	t0 := time.Unix(0, 0)
	if !ch.due(t0, "a") {
		t.Fatal("an unmeasured holder is not due")
	}
	ch.Observed(t0, "a", 20*time.Millisecond)
	if ch.due(t0.Add(59*time.Second), "a") || !ch.due(t0.Add(time.Minute), "a") {
		t.Fatal("due before ProbeEvery, or not after it")
	}
	ch.Measured(t0.Add(time.Minute), "a", 0, false)
	if ch.due(t0.Add(90*time.Second), "a") {
		t.Fatal("due again right after a failed measurement (it ranks the holder last until ProbeEvery)")
	}
}

// A holder takes a client's regret at up to RegretFactor × the
// coordinates' estimate (the next holder no nearer than itself, less
// itself) + RegretMargin: a client between two holders says little, one
// far from every other holder much; a client without a coordinate is held
// to the margin; no bound with the factor 0, without a coordinate of the
// holder's own, or with no other holder as far.
func TestAttachConfig_RegretBound(t *testing.T) {
	cfg := DefaultAttachConfig()
	cfg.RegretFactor, cfg.RegretMargin = 1.5, 2*time.Millisecond
	at := func(x float64) vivaldi.Coord { return vivaldi.Coord{Vec: []float64{x, 0}} }
	self := at(0)
	others := []vivaldi.Coord{at(0.012), at(0.030), at(0.100), {Vec: []float64{1, 2, 3}}}
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name   string
		client vivaldi.Coord
		want   time.Duration
	}{
		// 10 ms from self; the holder at 12 ms is nearer (it may have
		// refused it), the next no nearer is at 30 ms: 10 ms more.
		{"near self", at(0.010), ms(1.5*10 + 2)},
		{"between self and the next", at(0.014), ms(1.5*2 + 2)},
		{"two nearer holders, the next far", at(0.020), ms(1.5*60 + 2)},
		{"no coordinate", vivaldi.Coord{}, 2 * time.Millisecond},
		{"other dimensions", vivaldi.Coord{Vec: []float64{1}}, 2 * time.Millisecond},
		{"past every other holder", at(0.2), noOtherChoice},
	} {
		if got := cfg.RegretBound(tc.client, self, others); got != tc.want {
			t.Errorf("%s: bound %v, want %v", tc.name, got, tc.want)
		}
	}
	off := cfg
	off.RegretFactor = 0
	if got := off.RegretBound(at(0.010), self, others); got != noOtherChoice {
		t.Errorf("RegretFactor 0: bound %v", got)
	}
	if got := cfg.RegretBound(at(0.010), vivaldi.Coord{}, others); got != noOtherChoice {
		t.Errorf("no coordinate of its own: bound %v", got)
	}
	for _, bad := range []AttachConfig{{Switch: 1, RegretFactor: 0.5}, {Switch: 1, RegretFactor: math.Inf(1)}, {Switch: 1, RegretFactor: 1, RegretMargin: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if err := DefaultAttachConfig().Validate(); err != nil {
		t.Error(err)
	}
}
