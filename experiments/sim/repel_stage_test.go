package sim

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Coordinates of a later stage are what the nodes and the clients use from
// the stage's time on: a run that starts in old coordinates and switches
// to new ones before anything is sent is the run in the new ones, and not
// the run in the old ones.
func TestSimulateRepel_LaterCoordinates(t *testing.T) {
	const n, S = 120, 4
	rtt, ids := stageSpace(t, n)
	old, fresh := stageCoords(t, rtt, 10), stageCoords(t, rtt, 300)
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

// NewsLag holds announcements back: a share of 0 is the run without it to
// the event; a lag is drawn from the run's seed (the same run twice is
// the same run) and changes the run; a share outside [0, 1] or a negative
// lag is refused.
func TestSimulateRepel_NewsLag(t *testing.T) {
	const n, S = 120, 4
	rtt, ids := stageSpace(t, n)
	vr := stageCoords(t, rtt, 100)
	cfg := repel.LocalConfig()
	cfg.Tokens = S
	opts := func(lag NewsLag) RepelOptions {
		return RepelOptions{RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: ids, Config: cfg, Seed: 5,
			Capacity: 2 * n / S, Quiet: 20 * time.Second, TickEvery: 500 * time.Millisecond, NewsLag: lag}
	}
	run := func(lag NewsLag) *RepelResult {
		t.Helper()
		r, err := SimulateRepel(opts(lag))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	same := func(a, b *RepelResult) bool {
		return slices.Equal(a.Superpeers, b.Superpeers) && a.SettledSeconds == b.SettledSeconds && maps.Equal(a.Events, b.Events)
	}
	none, zero := run(NewsLag{}), run(NewsLag{Share: 0, Max: 10 * time.Second})
	if !same(none, zero) {
		t.Errorf("a share of 0 changed the run: %v at %.1f s %v, without: %v at %.1f s %v",
			zero.Superpeers, zero.SettledSeconds, zero.Events, none.Superpeers, none.SettledSeconds, none.Events)
	}
	lag := NewsLag{Share: 0.5, Max: 10 * time.Second}
	a, b := run(lag), run(lag)
	if !same(a, b) {
		t.Errorf("the same lagged run twice: %v at %.1f s, then %v at %.1f s", a.Superpeers, a.SettledSeconds, b.Superpeers, b.SettledSeconds)
	}
	if same(a, none) {
		t.Errorf("half the news held back by up to 10 s changed nothing (%v at %.1f s): the lag is not applied", a.Superpeers, a.SettledSeconds)
	}
	for _, bad := range []NewsLag{{Share: -0.1}, {Share: 1.5}, {Share: 0.5, Max: -time.Second}} {
		if _, err := SimulateRepel(opts(bad)); err == nil {
			t.Errorf("news lag %+v taken", bad)
		}
	}
}

// stageSpace is the stage tests' space: n PlanetLab peers and their IDs
// (seed 3).
func stageSpace(t *testing.T, n int) (latency.RTTs, []string) {
	t.Helper()
	pids, _, err := Identities(3, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	return planetlab(t, n, 3), IDStrings(pids)
}

// stageCoords is rounds of Vivaldi on rtt (seed 3).
func stageCoords(t *testing.T, rtt latency.RTTs, rounds int) *VivaldiResult {
	t.Helper()
	vr, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: 3, Rounds: rounds})
	if err != nil {
		t.Fatal(err)
	}
	return vr
}
