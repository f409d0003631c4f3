package swarm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/repel"
)

// speaks lists the protocols of peer i's host whose ID contains part.
func speaks(s *Swarm, i int, part string) []string {
	var out []string
	for _, p := range s.Peers[i].Host.Mux().Protocols() {
		if strings.Contains(string(p), part) {
			out = append(out, string(p))
		}
	}
	return out
}

// TestJoinLate_StartsVivaldiAndRepelAsThePeerJoins: a held peer runs
// nothing of the swarm's before it joins — no Vivaldi service and no token
// selector, neither protocol on its host — though both run on the others;
// once JoinLate returns it is live with its own Vivaldi service of the
// swarm's run, sampling, and a token selector that reads that service,
// learns the count and gets served.
func TestJoinLate_StartsVivaldiAndRepelAsThePeerJoins(t *testing.T) {
	if testing.Short() {
		t.Skip("a live token swarm: 20-30 s")
	}
	const n, hold = 14, 2
	s, _ := planetlabSwarmWith(t, n, 5, func(c *Config) { c.Hold = hold })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.Wait(ctx, VivaldiWait{Bound: 0.3, Patience: 5}); err != nil {
		t.Fatal(err)
	}
	rr, err := s.StartRepel(ctx, v, MethodParams{Superpeers: 2, Fraction: 0.25, TTL: 9 * time.Second, Model: repel.Attract}.RepelOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Close()
	late := []int{n - 2, n - 1}
	for _, i := range late {
		if slices.Contains(s.Live(), i) {
			t.Fatalf("held peer %d is live", i)
		}
		if v.Service(i) != nil || rr.Selector(i) != nil {
			t.Fatalf("held peer %d: Vivaldi service %v, selector %v before it joined", i, v.Service(i) != nil, rr.Selector(i) != nil)
		}
		if p := speaks(s, i, "vivaldi"); len(p) > 0 {
			t.Fatalf("held peer %d speaks %v before it joined", i, p)
		}
		if p := speaks(s, i, "attach"); len(p) > 0 {
			t.Fatalf("held peer %d speaks %v before it joined", i, p)
		}
	}
	if len(speaks(s, 0, "vivaldi")) == 0 || len(speaks(s, 0, "attach")) == 0 {
		t.Fatalf("peer 0 speaks %v: the test looks for the wrong protocol IDs", s.Peers[0].Host.Mux().Protocols())
	}
	if s.Held() != hold {
		t.Fatalf("Held() = %d, want %d", s.Held(), hold)
	}
	for _, i := range late {
		if err := s.JoinLate(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if s.Held() != 0 || len(s.Live()) != n {
		t.Fatalf("after the joins: %d held, %d live", s.Held(), len(s.Live()))
	}
	for _, i := range late {
		svc, sel := v.Service(i), rr.Selector(i)
		if svc == nil || sel == nil {
			t.Fatalf("joined peer %d: Vivaldi service %v, selector %v", i, svc != nil, sel != nil)
		}
		if sel.Vivaldi() != svc {
			t.Fatalf("joined peer %d: its selector reads another Vivaldi service than the swarm's", i)
		}
		if s.Selector(i) != nil {
			t.Fatalf("joined peer %d has a prefix selector", i)
		}
	}
	if err := s.JoinLate(ctx, late[0]); err == nil {
		t.Fatal("a second JoinLate of one peer was not refused")
	}
	if !pollUntil(ctx, func() bool {
		for _, i := range late {
			if v.Service(i).Stats().Samples == 0 || rr.Selector(i).Superpeer() == "" || s.ActiveCount(i) != s.ActiveCount(0) {
				return false
			}
		}
		return true
	}) {
		for _, i := range late {
			t.Logf("peer %d: %d samples, superpeer %q, count %d (peer 0: %d)", i, v.Service(i).Stats().Samples, rr.Selector(i).Superpeer(), s.ActiveCount(i), s.ActiveCount(0))
		}
		t.Fatal("the late peers were not sampling, served and on the swarm's count in time")
	}
	t.Logf("late peers served; count %d; state %s", s.ActiveCount(0), rr.State())
}
