package swarm

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestVivaldi_SwarmLive: 60 peers of the swarm run the real coordinate
// protocol over PlanetLab latencies until the live median relative error is
// under 0.25.
func TestVivaldi_SwarmLive(t *testing.T) {
	s, _ := planetlabSwarm(t, 60, 5)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sum, err := v.Wait(ctx, VivaldiWait{Bound: 0.25, Patience: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("median %.3f p90 %.3f after %.1f s, %.0f samples per peer", sum.Median, sum.P90, sum.Seconds, sum.Samples)
	for i := range s.Peers {
		if c := v.Coord(i); !c.IsValid() {
			t.Errorf("peer %d: invalid coordinate %+v", i, c)
		}
	}
	for i := range s.Peers {
		if d := v.Service(i).Drops(); len(d) > 0 {
			t.Errorf("peer %d dropped frames between honest peers: %v", i, d)
		}
	}
}

// TestVivaldiRun_RTTExcessIsSmallOnAnIdleSwarm: every sample is checked
// against the matrix; on a small swarm the machine adds about a
// millisecond, so the median excess is small and never negative by more
// than rounding (a sample cannot beat the link's latency).
func TestVivaldiRun_RTTExcessIsSmallOnAnIdleSwarm(t *testing.T) {
	s, _ := planetlabSwarm(t, 30, 4)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !pollUntil(ctx, func() bool { _, _, n := v.RTTExcess(); return n >= 200 }) {
		t.Fatal("fewer than 200 samples in a minute")
	}
	med, p90, n := v.RTTExcess()
	if med < -0.05 || med > 5 || p90 < med {
		t.Errorf("sample excess over the matrix RTT: median %.2f ms, p90 %.2f ms over %d samples; want a small positive median", med, p90, n)
	}
	v.excess.mu.Lock()
	least := slices.Min(v.excess.ms)
	v.excess.mu.Unlock()
	if least < -0.05 {
		t.Errorf("a sample measured %.2f ms less than its link's RTT", -least)
	}
	t.Logf("excess median %.2f ms, p90 %.2f ms over %d samples", med, p90, n)
}
