package sim

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// line puts peers on a line at the given predicted positions (seconds) and
// takes their true RTTs (ms) from rtt.
func line(pos []float64, rtt func(i, j int) float64) ([]vivaldi.Coord, latency.RTTs, []string) {
	coords := make([]vivaldi.Coord, len(pos))
	ids := make([]string, len(pos))
	for i, x := range pos {
		coords[i] = vivaldi.Coord{Vec: []float64{x}}
		ids[i] = fmt.Sprintf("p%02d", i)
	}
	return coords, latency.NewMatrix("line", len(pos), rtt), ids
}

func absDiffMS(pos []float64) func(i, j int) float64 {
	return func(i, j int) float64 {
		d := pos[i] - pos[j]
		if d < 0 {
			d = -d
		}
		return d * 1000
	}
}

func testAttacher(t *testing.T, pos []float64, rtt func(i, j int) float64, capacity, probe int) *attacher {
	t.Helper()
	return testAttacherDisplacing(t, pos, rtt, capacity, probe, 0)
}

func testAttacherDisplacing(t *testing.T, pos []float64, rtt func(i, j int) float64, capacity, probe int, displace time.Duration) *attacher {
	t.Helper()
	coords, m, ids := line(pos, rtt)
	cfg := repel.DefaultAttachConfig()
	cfg.Probe = probe
	a, err := newAttacher(m, coords, ids, capacity, displace, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A full holder refuses; the client takes the next nearest that accepts.
// Attachments to a peer that stops holding lapse.
func TestAttacher_CapacityOverflowsToNext(t *testing.T) {
	// Holders 0 (at 0) and 1 (at 0.1 s); clients 2, 3, 4 next to holder 0.
	pos := []float64{0, 0.1, 0.001, 0.002, 0.003}
	a := testAttacher(t, pos, absDiffMS(pos), 2, 0)
	a.round([]int{0, 1}, 0, []int{2, 3, 4})
	if want := []int{0, 1, 0, 0, 1}; !slices.Equal(a.assignment([]int{0, 1}), want) {
		t.Fatalf("assignment %v, want %v", a.assignment([]int{0, 1}), want)
	}
	if a.stats.RefusedFull != 1 || a.stats.Requests != 4 || a.load(0) != 2 || a.load(1) != 1 {
		t.Fatalf("stats %+v, loads %d and %d", a.stats, a.load(0), a.load(1))
	}
	// A renewal keeps everyone where they are (a holder accepts its own
	// client when full), whatever the order.
	a.round([]int{0, 1}, 15*time.Second, []int{4, 3, 2})
	if want := []int{0, 1, 0, 0, 1}; !slices.Equal(a.assignment([]int{0, 1}), want) {
		t.Fatalf("after renewal %v, want %v", a.assignment([]int{0, 1}), want)
	}
	// Holder 0 loses its token: its clients choose anew, and the one that
	// finds holder 1 full (client 4 and then 2 took its two places) is left
	// unattached.
	a.round([]int{1}, 30*time.Second, []int{2, 3, 4})
	if want := []int{-1, 1, 1, -1, 1}; !slices.Equal(a.assignment([]int{1}), want) || a.stats.Unattached != 1 {
		t.Fatalf("after holder 0 left %v (%d unattached), want %v", a.assignment([]int{1}), a.stats.Unattached, want)
	}
}

// The clients measure with the latency space's true RTTs: a client takes
// the fastest of the holders its chooser measured, and a full one refuses.
func TestAttacher_MeasuresTrueRTT(t *testing.T) {
	// Predicted: holders 1, 2, 3, 4 at 10, 20, 30, 90 ms from client 0.
	// True: 50, 40, 15, 5 ms (5 is beyond every prediction: not measured).
	pos := []float64{0, 0.010, 0.020, 0.030, 0.090, 0.5}
	trueRTT := []float64{0, 50, 40, 15, 5, 100}
	rtt := func(i, j int) float64 {
		switch {
		case i == j:
			return 0
		case i == 0:
			return trueRTT[j]
		case j == 0:
			return trueRTT[i]
		}
		return 100
	}
	hs := []int{1, 2, 3, 4}
	for _, c := range []struct{ probe, want, probes int }{{0, 1, 0}, {3, 3, 3}, {4, 4, 4}} {
		a := testAttacher(t, pos, rtt, 0, c.probe)
		a.round(hs, 0, []int{0})
		if a.att[0] != c.want || a.stats.Probes != c.probes {
			t.Errorf("probe %d: attached to %d after %d probes, want %d after %d", c.probe, a.att[0], a.stats.Probes, c.want, c.probes)
		}
	}
	// Exploring (after asking) measures holder 4, which no prediction
	// ranks among the first three: the client goes there at the next
	// round, and without exploring it stays with holder 3.
	for _, explore := range []int{0, 1} {
		a := testAttacher(t, pos, rtt, 0, 3)
		a.cfg.Explore = explore
		a.round(hs, 0, []int{0})
		first := a.att[0]
		a.round(hs, 15*time.Second, []int{0})
		want := map[int]int{0: 3, 1: 4}[explore]
		if first != 3 || a.att[0] != want || a.stats.Explored != explore {
			t.Errorf("explore %d: attached to %d then %d after %d explorations, want 3 then %d after %d", explore, first, a.att[0], a.stats.Explored, want, explore)
		}
	}
	// Capacity 1 and peer 5 is holder 3's client: the next fastest.
	a := testAttacher(t, pos, rtt, 1, 3)
	a.round(hs, 0, nil) // the holders' tables
	a.served[3].Admit(epoch0, peer.ID(a.ids[5]), 0, superpeer.ClientCoord{})
	a.att[5] = 3
	a.round(hs, 0, []int{0})
	if a.att[0] != 2 || a.stats.RefusedFull != 1 {
		t.Fatalf("attached to %d (refused %d), want 2 after holder 3 refused", a.att[0], a.stats.RefusedFull)
	}
}

// With Displace a full holder keeps the clients that lose most without it:
// a client next to holder 0 takes the place of one halfway between the
// holders, which then goes to holder 1, in the same round. Without it the
// first to ask keeps its place and the near client goes far.
func TestAttacher_DisplacesTheClientThatLosesLeast(t *testing.T) {
	// Holders 0 (at 0) and 1 (at 100 ms); client 2 at 49 ms (2 ms of
	// regret for holder 0), clients 3 and 4 at 1 and 2 ms (96-98 ms).
	pos := []float64{0, 0.1, 0.049, 0.001, 0.002}
	hs := []int{0, 1}
	for _, c := range []struct {
		displace  time.Duration
		want      []int
		displaced int
		cost      float64 // the clients' RTTs, ms
	}{
		{0, []int{0, 1, 0, 0, 1}, 0, 49 + 1 + 98},
		{time.Millisecond, []int{0, 1, 1, 0, 0}, 1, 51 + 1 + 2},
		{3 * time.Millisecond, []int{0, 1, 1, 0, 0}, 1, 51 + 1 + 2},
		{100 * time.Millisecond, []int{0, 1, 0, 0, 1}, 0, 49 + 1 + 98},
	} {
		a := testAttacherDisplacing(t, pos, absDiffMS(pos), 2, 0, c.displace)
		a.round(hs, 0, []int{2, 3, 4})
		got := a.assignment(hs)
		cost := 0.0
		for i := 2; i < len(got); i++ {
			cost += absDiffMS(pos)(i, got[i])
		}
		if !slices.Equal(got, c.want) || a.stats.Displaced != c.displaced || math.Abs(cost-c.cost) > 1e-6 || a.stats.Unattached != 0 {
			t.Errorf("displace %v: assignment %v (%d displaced, %d unattached, clients' RTT %.1f ms), want %v (%d, 0, %.1f)",
				c.displace, got, a.stats.Displaced, a.stats.Unattached, cost, c.want, c.displaced, c.cost)
		}
		// The next round keeps everyone: renewals are never displaced
		// and no one gains by another displacement.
		a.round(hs, 15*time.Second, []int{4, 3, 2})
		if again := a.assignment(hs); !slices.Equal(again, got) || a.stats.Displaced != c.displaced {
			t.Errorf("displace %v: the next round moved clients: %v -> %v (%d displaced)", c.displace, got, again, a.stats.Displaced)
		}
	}
}
