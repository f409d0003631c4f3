package counters

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSet_AddGetSnapshot(t *testing.T) {
	var s Set
	if s.Get("x") != 0 || len(s.Snapshot()) != 0 || s.Snapshot() == nil {
		t.Fatalf("zero Set: Get %d, Snapshot %v", s.Get("x"), s.Snapshot())
	}
	s.Add("a", 1)
	s.Add("a", 2)
	s.Add("b", 0)
	if s.Get("a") != 3 || s.Get("b") != 0 || s.Get("c") != 0 {
		t.Errorf("Get a %d b %d c %d, want 3 0 0", s.Get("a"), s.Get("b"), s.Get("c"))
	}
	snap := s.Snapshot()
	if len(snap) != 2 || snap["a"] != 3 {
		t.Errorf("Snapshot %v, want a:3 b:0", snap)
	}
	snap["a"] = 100 // a copy: the set does not change
	if s.Get("a") != 3 {
		t.Errorf("Snapshot is not a copy: a %d", s.Get("a"))
	}
}

func TestSet_Concurrent(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	const workers, each = 8, 1000
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s.Add("all", 1)
				s.Add(fmt.Sprintf("w%d", w), 1)
				if i%100 == 0 {
					_ = s.Snapshot()
					_ = s.Get("all")
				}
			}
		}()
	}
	wg.Wait()
	if s.Get("all") != workers*each {
		t.Errorf("all %d, want %d", s.Get("all"), workers*each)
	}
	for w := range workers {
		if got := s.Get(fmt.Sprintf("w%d", w)); got != each {
			t.Errorf("w%d %d, want %d", w, got, each)
		}
	}
}

var testFams = []Family{
	{Name: "superpeer_test_events_total", Help: "events", Kind: Counter},
	{Name: "superpeer_test_drops_total", Help: "drops", Kind: Counter, Label: "reason"},
	{Name: "superpeer_test_load", Help: "load", Kind: Gauge},
	{Name: "superpeer_test_error_ratio", Help: "error", Kind: MeanGauge},
}

// reporter is one component: a counter, drops, a load and an error.
func reporter(events float64, drops *Set, load, errEst float64) func(Emit) {
	return func(emit Emit) {
		emit(0, "", events)
		EmitAll(emit, 1, drops.Snapshot(), "decode", "bad")
		emit(2, "", load)
		emit(3, "", errEst)
	}
}

func TestRegister_NilRegistersNothing(t *testing.T) {
	stop, err := Register(nil, testFams, reporter(1, &Set{}, 1, 1))
	if err != nil || stop == nil {
		t.Fatalf("Register(nil): %v", err)
	}
	stop()
	var none *prometheus.Registry
	stop, err = Register(none, testFams, reporter(1, &Set{}, 1, 1))
	if err != nil || stop == nil {
		t.Fatalf("Register(nil *Registry): %v", err)
	}
	stop()
}

func TestRegister_ExportsAndSharesPerRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var d1, d2 Set
	d1.Add("decode", 2)
	d2.Add("decode", 1)
	d2.Add("other", 5)
	stop1, err := Register(reg, testFams, reporter(3, &d1, 4, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	// A second peer on the same registry joins the first's collector.
	stop2, err := Register(reg, testFams, reporter(10, &d2, 1, 1.5))
	if err != nil {
		t.Fatalf("second Register on one registry: %v", err)
	}
	want := map[string]map[string]float64{
		"superpeer_test_drops_total":  {"bad": 0, "decode": 3, "other": 5},
		"superpeer_test_error_ratio":  {"": 1},
		"superpeer_test_events_total": {"": 13},
		"superpeer_test_load":         {"": 5},
	}
	checkValues(t, reg, want)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		wantType := "GAUGE"
		if mf.GetName() == "superpeer_test_events_total" || mf.GetName() == "superpeer_test_drops_total" {
			wantType = "COUNTER"
		}
		if mf.GetType().String() != wantType || mf.GetHelp() == "" {
			t.Errorf("%s: type %v help %q, want %s with help", mf.GetName(), mf.GetType(), mf.GetHelp(), wantType)
		}
	}
	// Another registry is independent.
	other := prometheus.NewRegistry()
	stop3, err := Register(other, testFams, reporter(7, &Set{}, 0, 0.25))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Values(other); err != nil || v["superpeer_test_events_total"][""] != 7 {
		t.Errorf("other registry: %v, %v; want events 7", v, err)
	}
	stop3()

	stop1()
	stop1() // idempotent
	want = map[string]map[string]float64{
		"superpeer_test_drops_total":  {"bad": 0, "decode": 1, "other": 5},
		"superpeer_test_error_ratio":  {"": 1.5},
		"superpeer_test_events_total": {"": 10},
		"superpeer_test_load":         {"": 1},
	}
	checkValues(t, reg, want)
	stop2()
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after the last stop: %d families (%v), want none", len(mfs), err)
	}
	// Registering again after everything stopped works.
	stop4, err := Register(reg, testFams, reporter(1, &Set{}, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer stop4()
	if v, err := Values(reg); err != nil || len(v) != 4 || len(v["superpeer_test_drops_total"]) != 2 {
		t.Errorf("re-registered: %v (%v), want 4 families, 2 drop reasons", v, err)
	}
}

func TestRegister_ConflictIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "superpeer_test_events_total", Help: "someone else's"}))
	if _, err := Register(reg, testFams, reporter(1, &Set{}, 0, 0)); err == nil {
		t.Error("Register over another collector's metric name: no error")
	}
}

func TestRegister_ConcurrentWithScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				var d Set
				d.Add("decode", 1)
				stop, err := Register(reg, testFams, reporter(1, &d, 1, 1))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
				}
				stop()
			}
		}()
	}
	wg.Wait()
}

func checkValues(t *testing.T, g prometheus.Gatherer, want map[string]map[string]float64) {
	t.Helper()
	got, err := Values(g)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, maps.Equal) {
		t.Errorf("gathered %v, want %v", got, want)
	}
}

// Mismatches names every missing or different series, and nothing for a
// subset of what is exported; Named lists the families under a prefix.
func TestMismatchesAndNamed(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var d Set
	d.Add("decode", 2)
	stop, err := Register(reg, testFams, reporter(3, &d, 4, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if bad, err := Mismatches(reg, map[string]map[string]float64{"superpeer_test_drops_total": {"decode": 2}, "superpeer_test_load": {"": 4}}); err != nil || bad != nil {
		t.Errorf("a subset of what is exported: %v, %v", bad, err)
	}
	bad, err := Mismatches(reg, map[string]map[string]float64{
		"superpeer_test_drops_total": {"decode": 3, "bad": 0},
		"superpeer_test_missing":     {"": 1},
	})
	if err != nil || len(bad) != 2 {
		t.Fatalf("%d mismatches (%v), want 2: %v", len(bad), err, bad)
	}
	if want := `superpeer_test_drops_total{"decode"} = 2 (present true), want 3`; bad[0] != want {
		t.Errorf("first mismatch %q, want %q", bad[0], want)
	}
	names, err := Named(reg, "superpeer_test_")
	if err != nil || len(names) != 4 {
		t.Errorf("Named: %v, %v; want the 4 test families", names, err)
	}
	if names, _ := Named(reg, "superpeer_other_"); len(names) != 0 {
		t.Errorf("Named under another prefix: %v", names)
	}
}
