package dht

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

func TestMetrics_RegisteredOnlyWhenAsked(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	nodes := testNetwork(t, 3, WithRegisterer(reg)) // three nodes on one registry: their values add up
	a, b := nodes[0], nodes[1]
	ctx := context.Background()
	s, err := a.Host().NewStream(ctx, b.ID(), a.closestProtocol())
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff}) // not a protobuf
	s.CloseWrite()
	s.Read(make([]byte, 1))
	s.Close()
	if _, err := a.Closest(ctx, b.Key(), 2); err != nil {
		t.Fatal(err)
	}
	// A server counts a request once its answer is written, which may be
	// after the asker has read it: wait until every request sent was
	// served.
	var lookups, served, sent uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		lookups, served, sent = 0, 0, 0
		for _, n := range nodes {
			lookups += n.Stats().Lookups.Load()
			served += n.Stats().ClosestServed.Load()
			sent += n.Stats().ClosestSent.Load()
		}
		if served == sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d closest requests sent, %d served after 5 s", sent, served)
		}
	}
	want := map[string]map[string]float64{
		"superpeer_dht_lookups_total":          {"": float64(lookups)},
		"superpeer_dht_lookup_errors_total":    {"": 0},
		"superpeer_dht_closest_requests_total": {"in": float64(served), "out": float64(sent)},
		"superpeer_dht_drops_total":            {dropDecode: 1, dropBadTarget: 0, dropBadPeer: 0, dropBadAddress: 0, dropLost: 0},
		"superpeer_dht_routing_table_peers":    {"": 6},
	}
	bad, err := counters.Mismatches(reg, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
	if lookups == 0 || sent == 0 {
		t.Errorf("lookups %d, sent %d: the activity was not counted", lookups, sent)
	}
	names, err := counters.Named(reg, "superpeer_dht_")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"superpeer_dht_closest_failures_total", "superpeer_dht_closest_called_off_total", "superpeer_dht_kad_requests_sent_total"} {
		if !slices.Contains(names, name) {
			t.Errorf("%s missing from %v", name, names)
		}
	}
	for _, n := range nodes {
		n.Close()
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after Close: %d families (%v), want none", len(mfs), err)
	}

	// Without the option nothing is registered, not even on the default
	// registry.
	for _, n := range testNetwork(t, 2) {
		if _, err := n.Closest(ctx, n.Key(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if names, err := counters.Named(prometheus.DefaultGatherer, "superpeer_"); err != nil || len(names) > 0 {
		t.Errorf("registered on the default registry without the option: %v (%v)", names, err)
	}
	if _, err := New(ctx, nodes[0].Host(), WithRegisterer(nil)); err == nil {
		t.Error("Registerer(nil) accepted")
	}
}
