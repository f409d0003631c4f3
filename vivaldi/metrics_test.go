package vivaldi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

func TestMetrics_RegisteredOnlyWhenAsked(t *testing.T) {
	_, hs := mockHosts(t, 3)
	regA, regB := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	a := newService(t, hs[0], WithInterval(0), WithSeed(1), WithRegisterer(regA))
	b := newService(t, hs[1], WithInterval(0), WithSeed(2), WithRegisterer(regB))
	if err := rawExchange(t, hs[1], hs[0].ID(), append(uvarint(10), 1, 2)); err == nil {
		t.Fatal("a truncated request was answered")
	}
	for i := 0; i < 3; i++ {
		if _, err := b.Sample(context.Background(), hs[0].ID()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "3 requests served", func() bool { return a.Stats().Served == 3 })
	check := func(reg prometheus.Gatherer, want map[string]map[string]float64) {
		t.Helper()
		bad, err := counters.Mismatches(reg, want)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Error(b)
		}
	}
	check(regA, map[string]map[string]float64{
		"superpeer_vivaldi_requests_served_total": {"": 3},
		"superpeer_vivaldi_samples_total":         {"ok": 0, "failed": 0},
		"superpeer_vivaldi_drops_total":           {dropDecode: 1, dropOversize: 0, dropNeighborDup: 0},
		"superpeer_vivaldi_error_ratio":           {"": a.Coordinate().Error},
	})
	check(regB, map[string]map[string]float64{
		"superpeer_vivaldi_requests_served_total": {"": 0},
		"superpeer_vivaldi_samples_total":         {"ok": 3, "failed": 0},
		"superpeer_vivaldi_drops_total":           {dropDecode: 0},
		"superpeer_vivaldi_error_ratio":           {"": b.Coordinate().Error},
	})
	// In range only: mocknet RTTs are microseconds, and on a loaded
	// machine one late reply makes every sample's relative error exceed
	// ErrorMax, where the estimate then stays (it failed in CI that way).
	if e := b.Coordinate().Error; !(e > 0 && e <= DefaultConfig().ErrorMax) {
		t.Errorf("b's error estimate %v is out of (0, ErrorMax]", e)
	}

	// A third service on b's registry shares it: counters add up, the
	// error estimate is the mean.
	c := newService(t, hs[2], WithInterval(0), WithSeed(3), WithRegisterer(regB))
	if _, err := c.Sample(context.Background(), hs[0].ID()); err != nil {
		t.Fatal(err)
	}
	check(regB, map[string]map[string]float64{
		"superpeer_vivaldi_samples_total": {"ok": 4},
		"superpeer_vivaldi_error_ratio":   {"": (b.Coordinate().Error + c.Coordinate().Error) / 2},
	})
	b.Close()
	c.Close()
	if mfs, err := regB.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after Close: %d families (%v), want none", len(mfs), err)
	}

	// Without the option nothing is registered, not even on the default
	// registry.
	d := newService(t, hs[2], WithInterval(0), WithSeed(4))
	if _, err := d.Sample(context.Background(), hs[0].ID()); err != nil {
		t.Fatal(err)
	}
	if names, err := counters.Named(prometheus.DefaultGatherer, "superpeer_"); err != nil || len(names) > 0 {
		t.Errorf("registered on the default registry without the option: %v (%v)", names, err)
	}
	if _, err := NewService(hs[2], WithRegisterer(nil)); err == nil || !strings.Contains(err.Error(), "WithRegisterer") {
		t.Errorf("WithRegisterer(nil): err = %v, want one naming the option", err)
	}
}
