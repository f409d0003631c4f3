package limits

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

var _ rcmgr.MetricsReporter = (*Refusals)(nil)

var t0 = time.Unix(1_000_000, 0)

// allowed is how many of n frames from p at now the limiter lets through.
func allowed(l *PerPeer, now time.Time, p string, n int) int {
	k := 0
	for range n {
		if l.Allow(now, p) {
			k++
		}
	}
	return k
}

// A bucket of 5 refilled at 2 a second: a burst of 5, then 2 a second,
// never more than the bucket; another peer has its own.
func TestPerPeer_Bucket(t *testing.T) {
	l := NewPerPeer(2, 5, 0)
	if got := allowed(l, t0, "a", 100); got != 5 {
		t.Fatalf("burst: %d of 100, want 5", got)
	}
	if got := allowed(l, t0.Add(time.Second), "a", 100); got != 2 {
		t.Errorf("1 s later: %d, want 2", got)
	}
	if got := allowed(l, t0.Add(1250*time.Millisecond), "a", 100); got != 0 {
		t.Errorf("0.25 s later: %d, want 0 (half a token)", got)
	}
	if got := allowed(l, t0.Add(1500*time.Millisecond), "a", 100); got != 1 {
		t.Errorf("0.5 s later: %d, want 1 (the half token and another)", got)
	}
	if got := allowed(l, t0.Add(time.Hour), "a", 100); got != 5 {
		t.Errorf("an hour later: %d, want the bucket's 5", got)
	}
	if got := allowed(l, t0, "b", 100); got != 5 {
		t.Errorf("peer b: %d, want its own 5", got)
	}
	// A clock that goes back refills nothing and breaks nothing.
	if got := allowed(l, t0, "a", 100); got != 0 {
		t.Errorf("clock back: %d, want 0", got)
	}
	if got := allowed(l, t0.Add(time.Hour+time.Second), "a", 100); got != 2 {
		t.Errorf("after the clock went back: %d, want 2", got)
	}
	// A flood of one frame a millisecond for 10 s (the last at 9.999 s)
	// gets the bucket's 5 and the 19 whole tokens of 19.998 refilled.
	m := NewPerPeer(2, 5, 0)
	got := 0
	for ms := 0; ms < 10_000; ms++ {
		got += allowed(m, t0.Add(time.Duration(ms)*time.Millisecond), "x", 1)
	}
	if got != 24 {
		t.Errorf("flood: %d through, want 24", got)
	}
}

// The limiter tracks at most its peers, forgetting the least recently
// seen; a forgotten peer starts again with a full bucket.
func TestPerPeer_Bounded(t *testing.T) {
	l := NewPerPeer(1, 2, 3)
	for _, p := range []string{"a", "b", "c"} {
		if got := allowed(l, t0, p, 10); got != 2 {
			t.Fatalf("%s: %d, want 2", p, got)
		}
	}
	if allowed(l, t0, "a", 1) != 0 { // a is now the most recent
		t.Fatal("a: allowed past its bucket")
	}
	if got := allowed(l, t0, "d", 10); got != 2 || l.Len() != 3 {
		t.Fatalf("d: %d allowed, %d tracked; want 2 and 3", got, l.Len())
	}
	// b was the least recently seen: forgotten, back with a full bucket;
	// a and c are still empty.
	if got := allowed(l, t0, "b", 10); got != 2 {
		t.Errorf("b after eviction: %d, want 2", got)
	}
	// b's return evicted c (a was seen after c).
	if got := allowed(l, t0, "a", 10); got != 0 {
		t.Errorf("a: %d, want 0 (still tracked, empty)", got)
	}
	if got := allowed(l, t0, "c", 10); got != 2 {
		t.Errorf("c: %d, want 2 (evicted by b, back full)", got)
	}
	if l.Len() != 3 {
		t.Errorf("%d tracked, want 3", l.Len())
	}
}

func TestPerPeer_Off(t *testing.T) {
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		l := NewPerPeer(r, 5, 0)
		if l != nil {
			t.Errorf("rate %v: a limiter, want nil (no limit)", r)
		}
		if allowed(l, t0, "a", 1000) != 1000 || l.Len() != 0 || l.Rate() != 0 || l.Burst() != 0 {
			t.Errorf("rate %v: the nil limiter limits", r)
		}
	}
	if l := NewPerPeer(1, 0, 0); l.Burst() != 1 || l.Rate() != 1 || allowed(l, t0, "a", 10) != 1 {
		t.Errorf("burst 0: %d, want a bucket of 1", l.Burst())
	}
}

func TestPerPeer_Concurrent(t *testing.T) {
	l := NewPerPeer(1, 100, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := allowed(l, t0, "a", 50)
			mu.Lock()
			total += k
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 100 {
		t.Errorf("%d allowed by 8 goroutines at one instant, want the bucket's 100", total)
	}
}

func TestRefusals(t *testing.T) {
	var r Refusals
	r.AllowStream("p", network.DirInbound)
	r.BlockStream("p", network.DirInbound)
	r.BlockProtocolPeer("/x/1", "p")
	r.BlockProtocolPeer("/x/1", "q")
	r.BlockProtocol("/y/1")
	r.BlockMemory(10)
	r.BlockConn(network.DirInbound, true)
	want := map[string]uint64{"stream": 1, "protocol-peer": 2, "protocol-peer /x/1": 2, "protocol": 1, "protocol /y/1": 1, "memory": 1, "conn": 1}
	got := r.Snapshot()
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
}
