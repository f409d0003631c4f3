package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Coordinates of a later stage are what the nodes and the clients use from
// the stage's time on: a run that starts in old coordinates and switches
// to new ones before anything is sent is the run in the new ones, and not
// the run in the old ones.
func TestSimulateRepel_LaterCoordinates(t *testing.T) {
	const n, S = 120, 4
	rtt := planetlab(t, n, 3)
	old, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: 3, Rounds: 10})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: 3, Rounds: 300})
	if err != nil {
		t.Fatal(err)
	}
	pids, _, err := Identities(3, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, id := range pids {
		ids[i] = string(id)
	}
	cfg := repel.LocalConfig()
	cfg.Tokens = S
	run := func(coords []vivaldi.Coord, later []CoordStage) *RepelResult {
		t.Helper()
		keep := slices.Clone(coords)
		r, err := SimulateRepel(RepelOptions{RTT: rtt, Coords: coords, Later: later, Neighbors: fresh.Neighbors, IDs: ids,
			Config: cfg, Seed: 5, Capacity: 2 * n / S, Quiet: 20 * time.Second, TickEvery: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(keep, coords, func(a, b vivaldi.Coord) bool { return slices.Equal(a.Vec, b.Vec) }) {
			t.Fatal("SimulateRepel changed the caller's coordinates")
		}
		return r
	}
	switched := run(old.Coords, []CoordStage{{At: time.Millisecond, Coords: fresh.Coords}})
	inFresh := run(fresh.Coords, nil)
	inOld := run(old.Coords, nil)
	if !slices.Equal(switched.Superpeers, inFresh.Superpeers) || switched.SettledSeconds != inFresh.SettledSeconds {
		t.Errorf("switched at 1 ms: holders %v settled at %.1f s; in the fresh coordinates all along: %v at %.1f s",
			switched.Superpeers, switched.SettledSeconds, inFresh.Superpeers, inFresh.SettledSeconds)
	}
	if slices.Equal(inOld.Superpeers, inFresh.Superpeers) && inOld.SettledSeconds == inFresh.SettledSeconds {
		t.Errorf("old and fresh coordinates gave the same run (%v at %.1f s): the test tells nothing", inOld.Superpeers, inOld.SettledSeconds)
	}
	if _, err := SimulateRepel(RepelOptions{RTT: rtt, Coords: old.Coords, Neighbors: fresh.Neighbors, IDs: ids, Config: cfg,
		Later: []CoordStage{{At: time.Second, Coords: fresh.Coords[:n-1]}}}); err == nil {
		t.Error("a stage one coordinate short was taken")
	}
	if _, err := SimulateRepel(RepelOptions{RTT: rtt, Coords: old.Coords, Neighbors: fresh.Neighbors, IDs: ids, Config: cfg,
		Later: []CoordStage{{At: 2 * time.Second, Coords: fresh.Coords}, {At: time.Second, Coords: old.Coords}}}); err == nil {
		t.Error("stages out of order were taken")
	}
}
