package swarm

import (
	"context"
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
