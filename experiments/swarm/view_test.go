package swarm

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"
	"time"
)

// TestProject_KeepsThePlaneOfMostSpread: points spread along two
// directions of an 8-dimensional space (and a little along a third) come
// out with their spread kept and their distances within that plane; a
// second projection with the first's axes does not flip the picture.
func TestProject_KeepsThePlaneOfMostSpread(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	u := []float64{0.6, 0.8, 0, 0, 0, 0, 0, 0}
	w := []float64{0, 0, 0, 1, 0, 0, 0, 0}
	var vecs, plane [][]float64
	for range 200 {
		a, b, c := rng.NormFloat64()*0.05, rng.NormFloat64()*0.02, rng.NormFloat64()*0.001
		x := make([]float64, 8)
		for k := range x {
			x[k] = 0.1 + a*u[k] + b*w[k]
		}
		plane = append(plane, append([]float64(nil), x...))
		x[7] += c
		vecs = append(vecs, x)
	}
	pts, axes, kept := Project(vecs, [2][]float64{})
	if kept < 0.99 {
		t.Errorf("kept %.4f of the spread, want > 0.99", kept)
	}
	if d := math.Abs(axes[0][0]*u[0] + axes[0][1]*u[1]); d < 0.99 {
		t.Errorf("first axis %v is not along %v (|cos| %.3f)", axes[0], u, d)
	}
	for k := 1; k < len(vecs); k++ {
		var d2 float64
		for a := range plane[k] {
			d2 += (plane[k][a] - plane[0][a]) * (plane[k][a] - plane[0][a])
		}
		want := math.Sqrt(d2) * 1000
		got := math.Hypot(pts[k][0]-pts[0][0], pts[k][1]-pts[0][1])
		if math.Abs(got-want) > 0.01*want+0.1 {
			t.Fatalf("point %d: projected distance %.2f ms, true %.2f ms", k, got, want)
		}
	}
	// The same cloud, mirrored: with the last axes the picture stays put
	// up to the mirror, never a swap of the axes.
	for _, x := range vecs {
		for a := range x {
			x[a] = 0.2 - x[a]
		}
	}
	pts2, _, _ := Project(vecs, axes)
	for k := range pts {
		if math.Abs(pts2[k][0]+pts[k][0]) > 0.01 || math.Abs(pts2[k][1]+pts[k][1]) > 0.01 {
			t.Fatalf("point %d: %v after mirroring, want %v", k, pts2[k], [2]float64{-pts[k][0], -pts[k][1]})
		}
	}
	if p, _, kept := Project(nil, [2][]float64{}); len(p) != 0 || kept != 0 {
		t.Errorf("no vectors: %v, kept %v", p, kept)
	}
	same := [][]float64{{1, 2, 3}, {1, 2, 3}}
	if p, _, kept := Project(same, [2][]float64{}); p[0] != [2]float64{} || kept != 0 {
		t.Errorf("one point twice: %v, kept %v", p, kept)
	}
}

// TestView_SnapshotMatchesThePrefixSelection: a view of 40 live peers
// running the prefix method draws what PrefixState says: every live peer,
// the superpeers, each client's link, each group's superpeer, each
// superpeer's load; a kill is refused until the swarm is ready, then
// recorded, and the map shows the group's new superpeer once the
// selection has converged again.
func TestView_SnapshotMatchesThePrefixSelection(t *testing.T) {
	const n, S, C = 40, 4, 20
	s, _ := planetlabSwarm(t, n, 3)
	view := NewView(s)
	stop := make(chan struct{})
	defer close(stop)
	go view.Track(stop)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	view.SetVivaldi(v)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.StartPrefix(ctx, prefixOptions(S, C)...); err != nil {
		t.Fatal(err)
	}
	defer s.StopMethod()
	view.WatchActive()
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	check := func(snap Snapshot, st PrefixState) {
		t.Helper()
		if snap.Method != "prefix" || snap.N != n || snap.Live != len(s.Live()) || snap.Target != S || snap.Capacity != C {
			t.Fatalf("snapshot: method %q n %d live %d target %d capacity %d", snap.Method, snap.N, snap.Live, snap.Target, snap.Capacity)
		}
		if snap.Superpeers != len(st.Superpeers) || len(snap.Loads) != len(st.Superpeers) {
			t.Errorf("%d superpeers and %d loads drawn, %d in the swarm", snap.Superpeers, len(snap.Loads), len(st.Superpeers))
		}
		if len(snap.Peers) != n {
			t.Fatalf("%d peers drawn, want %d", len(snap.Peers), n)
		}
		for _, p := range snap.Peers {
			want := st.Assignment[p.I]
			switch {
			case s.dead[p.I].Load():
				if p.Role != "dead" {
					t.Errorf("dead peer %d drawn as %s", p.I, p.Role)
				}
			case p.SP != want:
				t.Errorf("peer %d drawn attached to %d, the swarm says %d", p.I, p.SP, want)
			case want == p.I && p.Role != "superpeer", want >= 0 && want != p.I && p.Role != "client":
				t.Errorf("peer %d drawn as %s", p.I, p.Role)
			}
			if p.G != s.Selector(0).Scheme().Group(s.Peers[p.I].Key) || math.Abs(p.K-KeyFraction(s.Peers[p.I].Key)) > 1e-6 {
				t.Errorf("peer %d: group %d key %v", p.I, p.G, p.K)
			}
		}
		for _, l := range snap.Loads {
			if got := s.Selector(l.SP).Attach().Load(); l.Load != got || l.Capacity != C {
				t.Errorf("superpeer %d: load %d/%d drawn, %d/%d in the swarm", l.SP, l.Load, l.Capacity, got, C)
			}
		}
		expected := s.ExpectedSuperpeers(s.Selector(st.Expected[0]).Scheme())
		for _, g := range snap.Groups {
			if g.Expected != expected[g.G] || g.SP != expected[g.G] {
				t.Errorf("group %d: superpeer %d (expected %d) drawn, the swarm's %d", g.G, g.SP, g.Expected, expected[g.G])
			}
		}
		if snap.Figures.ClientRTT <= 0 || snap.Figures.RandomRTT <= 0 || snap.Figures.KMedianRTT <= 0 || snap.Figures.VivaldiMedian <= 0 {
			t.Errorf("figures %+v", snap.Figures)
		}
		if snap.Spread <= 0 || snap.Spread > 1 {
			t.Errorf("spread kept %v", snap.Spread)
		}
	}
	first := view.Snapshot()
	check(first, s.PrefixState())
	time.Sleep(time.Second) // a second of traffic to count, not a synchronisation
	if second := view.Snapshot(); second.Figures.MsgsPerPeerSec <= 0 {
		t.Errorf("messages per peer per second %v on a running swarm", second.Figures.MsgsPerPeerSec)
	}

	victim := s.PrefixState().Superpeers[0]
	if _, err := view.Kill([]int{victim}, "test"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("kill before ready: %v, want ErrNotReady", err)
	}
	view.SetReady()
	if _, err := view.Kill([]int{n + 5}, "test"); err == nil {
		t.Fatal("killed a peer that does not exist")
	}
	sps, err := view.Kill([]int{victim}, "test")
	if err != nil || sps != 1 {
		t.Fatalf("kill of superpeer %d: %d superpeers, %v", victim, sps, err)
	}
	if _, err := view.Kill([]int{victim}, "test"); err == nil {
		t.Fatal("killed a dead peer again")
	}
	if _, err := s.WaitPrefix(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	after := view.Snapshot()
	check(after, s.PrefixState())
	if after.Killed != 1 || after.Live != n-1 || after.Superpeers != S {
		t.Errorf("after the kill: %d killed, %d live, %d superpeers", after.Killed, after.Live, after.Superpeers)
	}
	var kills []Event
	for _, e := range after.Events {
		if e.Kind == "kill" {
			kills = append(kills, e)
		}
	}
	if len(kills) != 1 || len(kills[0].Peers) != 1 || kills[0].Peers[0] != victim || kills[0].Superpeers != 1 {
		t.Errorf("kill events %+v", kills)
	}
}

// TestView_SnapshotDrawsTheTokens: on 40 live repel peers, once every
// token is held by exactly one peer and settled, the view draws each token
// at its holder, its trail ending there, the holders as superpeers, and
// the clients attached as RepelState says.
func TestView_SnapshotDrawsTheTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("a live repel swarm: its tokens are first minted after JoinWait and settle after T_settle")
	}
	const n, S, C = 40, 3, 30
	s, v := repelSwarm(t, n, 4)
	view := NewView(s)
	view.SetVivaldi(v)
	stop := make(chan struct{})
	defer close(stop)
	go view.Track(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startRepel(t, ctx, s, v, S, C)
	defer r.Close()
	view.WatchRepel(r)
	settled := func(st RepelState) bool { return st.TokensBack() && st.Unsettled == 0 && len(st.Superpeers) == S }
	if _, err := r.Wait(ctx, r.Start(), settled); err != nil {
		t.Fatal(err)
	}
	snap := view.Snapshot()
	st := r.State()
	if !settled(st) {
		t.Skip("a token moved between the wait and the snapshot")
	}
	if snap.Method != "repel" || snap.Target != S || snap.Superpeers != S || len(snap.Tokens) != S {
		t.Fatalf("method %q target %d superpeers %d tokens %d", snap.Method, snap.Target, snap.Superpeers, len(snap.Tokens))
	}
	for _, tok := range snap.Tokens {
		want := st.Holders[tok.ID]
		if len(want) != 1 || tok.Holder != want[0] || !tok.Settled || len(tok.Trail) == 0 || tok.Trail[len(tok.Trail)-1] != want[0] {
			t.Errorf("token %+v drawn; the swarm's holders %v", tok, want)
		}
		if p := snap.Peers[tok.Holder]; p.Role != "superpeer" || p.SP != tok.Holder || !p.Pos {
			t.Errorf("token %d's holder drawn as %+v", tok.ID, p)
		}
	}
	for _, p := range snap.Peers {
		if p.SP != st.Assignment[p.I] {
			t.Errorf("peer %d drawn attached to %d, the swarm says %d", p.I, p.SP, st.Assignment[p.I])
		}
	}
}
