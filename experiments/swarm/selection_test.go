package swarm

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func prefixOptions(S, capacity int) []superpeer.Option {
	return []superpeer.Option{
		superpeer.WithSuperpeers(S),
		superpeer.WithMinRecheck(200 * time.Millisecond),
		superpeer.WithCapacity(capacity),
		superpeer.WithTTL(3 * time.Second),
	}
}

func TestPrefix_SwarmSelectsExactlyTheRightSuperpeers(t *testing.T) {
	s, _ := planetlabSwarm(t, 200, 11)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// 200 peers in 16 groups is 12.5 a group: capacity 14 makes the
	// fullest groups overflow into their neighbours.
	if err := s.StartPrefix(ctx, prefixOptions(16, 14)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	st := s.PrefixState()
	if len(st.Superpeers) != len(st.Expected) || len(st.Superpeers) != 16 {
		t.Fatalf("superpeers %v, expected %v", st.Superpeers, st.Expected)
	}
	for k := range st.Superpeers {
		if st.Superpeers[k] != st.Expected[k] {
			t.Fatalf("superpeers %v, expected %v", st.Superpeers, st.Expected)
		}
	}
	overflow := 0
	scheme := s.Selector(0).Scheme()
	home := s.ExpectedSuperpeers(scheme)
	for i, sp := range st.Assignment {
		if sp < 0 {
			t.Errorf("peer %d unserved", i)
		} else if sp != home[scheme.Group(s.Peers[i].Key)] {
			overflow++
		}
	}
	for _, i := range st.Expected {
		if l := s.Selector(i).Attach().Load(); l > 14 {
			t.Errorf("superpeer %d serves %d clients, capacity 14", i, l)
		}
	}
	t.Logf("%d clients served outside their group (capacity 14)", overflow)
}

// TestPrefix_TightCapacityServesEveryone: the capacity is exactly the
// number of clients (8 superpeers × 14 places for 112 clients), so the
// clients of the fullest groups must find the last free places, possibly
// far down their list of other groups (a step tries a few groups, later
// steps the next ones): every client is served and no superpeer is over C.
func TestPrefix_TightCapacityServesEveryone(t *testing.T) {
	const n, S, C = 120, 8, 14
	s, _ := planetlabSwarm(t, n, 14)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.StartPrefix(ctx, prefixOptions(S, C)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	st := s.PrefixState()
	if len(st.Superpeers) != S || st.Unserved != 0 || st.Room != 0 {
		t.Fatalf("%d superpeers, %d unserved, %d places free; want %d, 0, 0", len(st.Superpeers), st.Unserved, st.Room, S)
	}
	scheme := s.Selector(0).Scheme()
	home := s.ExpectedSuperpeers(scheme)
	away, biggest := 0, 0
	for i, sp := range st.Assignment {
		if sp >= 0 && sp != i && sp != home[scheme.Group(s.Peers[i].Key)] {
			away++
		}
	}
	for _, i := range st.Expected {
		if l := s.Selector(i).Attach().Load(); l > C {
			t.Errorf("superpeer %d serves %d clients, capacity %d", i, l, C)
		}
	}
	for g := 0; g < S; g++ {
		members := 0
		for _, p := range s.Peers {
			if scheme.Group(p.Key) == g {
				members++
			}
		}
		biggest = max(biggest, members-1)
	}
	if biggest <= C {
		t.Fatalf("no group has more than %d clients: the test does not overflow", C)
	}
	t.Logf("%d clients served outside their group; the largest group has %d clients", away, biggest)
}

func TestPrefix_SwarmRecoversWhenEverySuperpeerDies(t *testing.T) {
	s, _ := planetlabSwarm(t, 200, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.StartPrefix(ctx, prefixOptions(16, 0)...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	before := s.PrefixState().Superpeers
	s.Kill(s.PickKill(0, true, rand.New(rand.NewSource(1))))
	killed := time.Now()
	took, err := s.WaitPrefix(ctx, killed)
	if err != nil {
		t.Fatal(err)
	}
	after := s.PrefixState()
	for _, i := range before {
		for _, j := range after.Superpeers {
			if i == j {
				t.Errorf("dead peer %d is still a superpeer", i)
			}
		}
	}
	if len(after.Superpeers) != 16 || after.Unserved != 0 {
		t.Errorf("after recovery: %d superpeers, %d unserved", len(after.Superpeers), after.Unserved)
	}
	t.Logf("recovered from the loss of all %d superpeers in %v", len(before), took)
}

func TestPrefix_LateJoinerNeedsOneLookup(t *testing.T) {
	m, err := latency.Builtin(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := latency.Place(m.Filled(), 120, 13)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := New(ctx, Config{N: 120, Seed: 13, RTT: pl, HostOf: pl.Host, Hold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConverged(ctx, 10); err != nil {
		t.Fatal(err)
	}
	opts := prefixOptions(8, 0)
	// Only the first decision counts: no timed rechecks, and attachments
	// that outlive the test.
	opts = append(opts, superpeer.WithRecheck(time.Hour), superpeer.WithTTL(time.Hour))
	if err := s.StartPrefix(ctx, opts...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	late := len(s.Peers) - 1
	sel := s.Selector(late)
	changes, stop := sel.Subscribe()
	defer stop()
	if err := s.JoinLate(ctx, late); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-changes:
		if c.Superpeer == "" {
			t.Fatalf("first decision left the peer unserved: %+v", c)
		}
	case <-ctx.Done():
		t.Fatal("no decision")
	}
	if n := sel.Lookups(); n != 1 {
		t.Errorf("the late joiner made %d lookups, want 1", n)
	}
	if _, err := s.WaitPrefix(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// The swarm's default TTL keeps one process's renewals (n / (TTL/3) a
// second) at most TTLScaleAbove × 3 / 9 s a second, and stays 9 s up to
// TTLScaleAbove peers.
func TestTTLFor_BoundsTheRenewalRate(t *testing.T) {
	for _, n := range []int{1, 200, 2000, 2001, 5000, 10000, 1000000} {
		ttl := TTLFor(n)
		if n <= TTLScaleAbove && ttl != 9*time.Second {
			t.Errorf("TTLFor(%d) = %v, want 9s", n, ttl)
		}
		if ttl < 9*time.Second {
			t.Errorf("TTLFor(%d) = %v, below 9s", n, ttl)
		}
		if rate, most := float64(n)/(ttl.Seconds()/3), float64(TTLScaleAbove)*3/9+1e-6; rate > most {
			t.Errorf("TTLFor(%d) = %v: %.0f renewals a second, more than %.0f", n, ttl, rate, most)
		}
	}
	if got := TTLFor(10000); got != 45*time.Second {
		t.Errorf("TTLFor(10000) = %v, want 45s", got)
	}
}
