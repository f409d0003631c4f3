package swarm

import (
	"context"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/repel"
)

// repelSwarm is a converged PlanetLab swarm whose nodes run GossipSub, with
// Vivaldi coordinates good enough to place tokens by.
func repelSwarm(t *testing.T, n int, seed int64) (*Swarm, *VivaldiRun) {
	t.Helper()
	m, err := latency.Builtin(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), n, seed)
	if err != nil {
		t.Fatal(err)
	}
	// The nodes live on this context (GossipSub stops with it).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	built := time.Now()
	s, err := New(ctx, Config{N: n, Seed: seed, RTT: pl, HostOf: pl.Host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConverged(ctx, 10); err != nil {
		t.Fatal(err)
	}
	v, err := s.StartVivaldi(VivaldiOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	start := time.Now()
	vs, err := v.Wait(ctx, VivaldiWait{Bound: 0.2, Patience: 10})
	if err != nil {
		t.Fatal(err)
	}
	// Good enough: sample slowly from now on, to leave the machine to the
	// method under test.
	v.SetInterval(2 * time.Second)
	t.Logf("swarm built and converged in %.1f s", start.Sub(built).Seconds())
	t.Logf("vivaldi: median %.3f p90 %.3f after %.1f s (%.0f samples per peer, %s)", vs.Median, vs.P90, vs.Seconds, vs.Samples, vs.Stopped)
	return s, v
}

func startRepel(t *testing.T, ctx context.Context, s *Swarm, v *VivaldiRun, S, capacity int) *RepelRun {
	t.Helper()
	cfg := RepelSwarmConfig(S, repel.Attract)
	r, err := s.StartRepel(ctx, v, RepelOptions{Config: cfg, Capacity: capacity, TTL: 12 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func logSummary(t *testing.T, r *RepelRun, took time.Duration) {
	t.Helper()
	sum, rs, err := r.Summary(took, rand.New(rand.NewSource(3)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d superpeers in %.1f s; client RTT mean %.1f p90 %.1f ms (random %.1f / %.1f, k-median %.1f / %.1f); load max %d; %d moves, %d mints, %d fenced; gossip %.1f msgs %.0f B per peer per s",
		sum.Count, took.Seconds(), sum.ClientRTT.Mean, sum.ClientRTT.P90, sum.RandomClientRTT.Mean, sum.RandomClientRTT.P90,
		sum.KMedianClientRTT.Mean, sum.KMedianClientRTT.P90, sum.ClientsPerSuperpeer.Max, rs.Moves, rs.Minted, rs.Fenced,
		sum.PerPeerPerSecond["gossip_messages"], sum.PerPeerPerSecond["gossip_bytes"])
	if len(rs.Drops) > 0 {
		t.Logf("drops between honest peers: %v", rs.Drops)
	}
	// A token's first minter, the peer nearest its name, looked the name up
	// first (no routing-table peer is nearer): the summary counts it.
	t.Logf("mint lookups %d (%d failed), their requests %d (%d failed, %d called off)", rs.Lookups, rs.LookupFailures, rs.LookupRequests, rs.LookupRequestFailures, rs.LookupRequestsCalledOff)
	if rs.Minted > 0 && (rs.Lookups == 0 || rs.LookupRequests == 0) || rs.LookupFailures > rs.Lookups || rs.LookupRequestFailures+rs.LookupRequestsCalledOff > rs.LookupRequests {
		t.Errorf("mint lookups %d (%d failed), requests %d (%d failed, %d called off) with %d mints", rs.Lookups, rs.LookupFailures, rs.LookupRequests, rs.LookupRequestFailures, rs.LookupRequestsCalledOff, rs.Minted)
	}
}

// waitLogged waits for cond, logging the state every 15 s.
func waitLogged(t *testing.T, ctx context.Context, r *RepelRun, since time.Time, cond func(RepelState) bool) (time.Duration, error) {
	t.Helper()
	last := time.Now()
	return r.Wait(ctx, since, func(st RepelState) bool {
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			stats, _ := r.counts()
			t.Logf("%.0f s: %d missing, %d duplicated, %d unsettled, %d unsurveyed, %d superpeers, %d wrong, %d unserved; %d minted, %d moves, %d fenced, %d move timeouts, %d surveys (%d moved); %d announced, %d heard, %d publish drops",
				time.Since(since).Seconds(), st.Missing, st.Duplicated, st.Unsettled, st.Unsurveyed, len(st.Superpeers), st.Wrong, st.Unserved,
				stats["minted"], stats["accepted"], stats["fenced"], stats["move-timed-out"], stats[repel.EventSurvey.String()], stats[repel.EventSurveyMoved.String()],
				stats["announce_sent"], stats["announce_received"], stats["publish_queue_full"])
		}
		if len(st.Waiting) != st.Unsettled+st.Unsurveyed {
			t.Errorf("waiting on %v: %d tokens, %d unsettled and %d unsurveyed holders", st.Waiting, len(st.Waiting), st.Unsettled, st.Unsurveyed)
		}
		return cond(st)
	})
}

func checkExactlyS(t *testing.T, r *RepelRun, S, capacity int) {
	t.Helper()
	st := r.State()
	if len(st.Superpeers) != S || !st.TokensBack() || st.Unsettled != 0 {
		t.Fatalf("%d superpeers, %d missing, %d duplicated, %d unsettled tokens; want exactly %d", len(st.Superpeers), st.Missing, st.Duplicated, st.Unsettled, S)
	}
	if st.Converged() && len(st.Waiting) != 0 {
		t.Fatalf("converged, yet waiting on %v", st.Waiting)
	}
	for _, i := range st.Superpeers {
		if l := r.Selector(i).Attach().Load(); capacity > 0 && l > capacity {
			t.Errorf("superpeer %d serves %d clients, capacity %d", i, l, capacity)
		}
	}
}

// TestRepel_SwarmSettles: 200 peers over PlanetLab, S = 8: every token
// settles, exactly 8 superpeers, every client attached.
func TestRepel_SwarmSettles(t *testing.T) {
	if testing.Short() {
		t.Skip("200 live peers: minutes on a loaded 2-core machine")
	}
	const n, S, capacity = 200, 8, 50
	s, v := repelSwarm(t, n, 21)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := startRepel(t, ctx, s, v, S, capacity)
	took, err := waitLogged(t, ctx, r, r.Start(), RepelState.Converged)
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyS(t, r, S, capacity)
	st := r.State()
	if st.Unserved != 0 || st.Wrong != 0 {
		t.Fatalf("%d clients unserved, %d wrongly attached", st.Unserved, st.Wrong)
	}
	logSummary(t, r, took)
}

// TestRepel_SwarmRecoversFromKill: after the tokens settle among 200
// peers, a quarter of the peers die, at least half of the holders among
// them: every token is held by exactly one live peer again within T_dead +
// T_settle, the selection converges again (exactly S superpeers, every
// client attached), and no token is duplicated once settled.
func TestRepel_SwarmRecoversFromKill(t *testing.T) {
	if testing.Short() {
		t.Skip("200 live peers: minutes on a loaded 2-core machine")
	}
	const n, S, capacity = 200, 8, 50
	s, v := repelSwarm(t, n, 22)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := startRepel(t, ctx, s, v, S, capacity)
	took, err := waitLogged(t, ctx, r, r.Start(), RepelState.Converged)
	if err != nil {
		t.Fatal(err)
	}
	logSummary(t, r, took)

	victims := r.PickKill(0.25, 0.5, rand.New(rand.NewSource(4)))
	holders := 0
	for _, i := range victims {
		if _, ok := r.Selector(i).Held(); ok {
			holders++
		}
	}
	if len(victims) != n/4 || holders < S/2 {
		t.Fatalf("picked %d victims with %d holders", len(victims), holders)
	}
	cfg := r.Config()
	start := time.Now()
	r.Kill(victims)
	back, err := waitLogged(t, ctx, r, start, RepelState.TokensBack)
	if err != nil {
		t.Fatal(err)
	}
	bound := cfg.DeadAfter + cfg.SettleAfter
	t.Logf("killed %d peers (%d holders); every token held once again after %.1f s (bound T_dead + T_settle = %v)", len(victims), holders, back.Seconds(), bound)
	if back > bound {
		t.Errorf("tokens back after %v, over T_dead + T_settle = %v", back, bound)
	}
	recovered, err := waitLogged(t, ctx, r, start, RepelState.Converged)
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyS(t, r, S, capacity)
	logSummary(t, r, recovered)
	// Settled: no token is duplicated or lost while we watch.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if st := r.State(); st.Duplicated != 0 || st.Missing != 0 {
			t.Fatalf("after settling: %d tokens duplicated, %d missing", st.Duplicated, st.Missing)
		}
	}
}

// TestCountHolders_HandOverIsNotADuplicate: a holder that has offered its
// token to a peer holding exactly the offered version is handing it on;
// two holders of a token otherwise (a re-mint, a move taken after its
// offer timed out) are a duplicate until fencing.
func TestCountHolders_HandOverIsNotADuplicate(t *testing.T) {
	tok := func(id uint32, epoch uint64, holder string) repel.Token {
		return repel.Token{ID: id, Epoch: epoch, Holder: holder}
	}
	held := map[int]repel.Token{
		1: tok(0, 1, "p1"),
		2: tok(1, 3, "p2"), 3: tok(1, 4, "p3"), // 2 offered epoch 4 to p3: a hand-over
		4: tok(2, 2, "p4"), 5: tok(2, 5, "p5"), // 4 offered epoch 3 to p5, p5 holds epoch 5
		6: tok(4, 1, "p6"), 7: tok(4, 1, "p7"), // no offer
	}
	offers := map[int]repel.Token{2: tok(1, 4, "p3"), 4: tok(2, 3, "p5")}
	holders := [][]int{{1}, {2, 3}, {4, 5}, {}, {6, 7}}
	missing, dup, hand := countHolders(holders, func(i int) repel.Token { return held[i] },
		func(i int) (repel.Token, bool) { o, ok := offers[i]; return o, ok })
	if missing != 1 || dup != 2 || hand != 1 {
		t.Errorf("missing %d, duplicated %d, hand-overs %d; want 1, 2 (tokens 2 and 4), 1 (token 1)", missing, dup, hand)
	}
}

// TestRepelState_Converged: the selection has converged only with every
// token held once and settled, every place surveyed (with surveys on),
// and every client attached to a superpeer that lists it, or no room left.
func TestRepelState_Converged(t *testing.T) {
	good := RepelState{Holders: [][]int{{1}, {2}}, Superpeers: []int{1, 2}}
	if !good.Converged() {
		t.Fatalf("%v: not converged", good)
	}
	for name, mut := range map[string]func(*RepelState){
		"missing":    func(s *RepelState) { s.Missing = 1 },
		"duplicated": func(s *RepelState) { s.Duplicated = 1 },
		"unsettled":  func(s *RepelState) { s.Unsettled = 1 },
		"unsurveyed": func(s *RepelState) { s.Unsurveyed = 1 },
		"wrong":      func(s *RepelState) { s.Wrong = 1 },
		"unserved":   func(s *RepelState) { s.Unserved, s.Room = 1, 3 },
		"too-few":    func(s *RepelState) { s.Superpeers = []int{1} },
	} {
		st := good
		mut(&st)
		if st.Converged() {
			t.Errorf("%s: %v counted as converged", name, st)
		}
	}
	full := good
	full.Unserved, full.Room = 2, 0
	if !full.Converged() {
		t.Errorf("clients unserved with no room left: %v not converged", full)
	}
}

// TestRestWatch_ScoresTheStateThatRested: the watch ends only after the
// selection has been converged with the same token holders for the rest; a
// token that moves or a moment unconverged starts the rest again, a client
// that moves to another holder while served does not but is counted, and
// the resting state's start and the first convergence are reported.
func TestRestWatch_ScoresTheStateThatRested(t *testing.T) {
	const s = time.Second
	a := RepelState{Holders: [][]int{{1}, {2}}, Superpeers: []int{1, 2}, Assignment: []int{1, 1, 2, 1}}
	clientMoved := a
	clientMoved.Assignment = []int{1, 1, 2, 2}
	tokenMoved := clientMoved
	tokenMoved.Holders, tokenMoved.Superpeers, tokenMoved.Assignment = [][]int{{1}, {3}}, []int{1, 3}, []int{1, 1, 3, 3}
	clientBack := tokenMoved
	clientBack.Assignment = []int{1, 1, 3, 1}
	broken := tokenMoved
	broken.Wrong = 1
	w := restWatch{period: 2 * s}
	steps := []struct {
		st    RepelState
		now   time.Duration
		done  bool
		moved int
	}{
		{broken, 0, false, 0},
		{a, 1 * s, false, 0},            // first convergence, rest from 1 s
		{clientMoved, 2500e6, false, 1}, // a client moved: counted, the rest goes on
		{tokenMoved, 2900e6, false, 0},  // a token moved: from 2.9 s
		{broken, 4 * s, false, 0},       // unconverged for a moment
		{tokenMoved, 5 * s, false, 0},   // from 5 s
		{clientBack, 6 * s, false, 1},
		{clientBack, 6999e6, false, 1},
		{clientBack, 7 * s, true, 1},
	}
	for k, step := range steps {
		if got := w.see(step.st, step.now); got != step.done || w.Moved != step.moved {
			t.Fatalf("step %d at %v: rested %v with %d moved, want %v with %d", k, step.now, got, w.Moved, step.done, step.moved)
		}
	}
	if w.At != 5*s || w.First != 1*s {
		t.Fatalf("rested from %v (want 5s), first converged at %v (want 1s)", w.At, w.First)
	}
	if z := (restWatch{}); !z.see(a, 0) {
		t.Fatal("no rest asked: the first converged state should do")
	}
}

// TestRestWatch_AllowsClientsInTransit: with a transit allowance, readings
// with up to that many clients between holders (wrong, or unserved while a
// holder has room) rest, one more breaks the rest, and the most in transit
// during the rest and at its end are reported; with no room left unserved
// clients are not in transit.
func TestRestWatch_AllowsClientsInTransit(t *testing.T) {
	const s = time.Second
	a := RepelState{Holders: [][]int{{1}, {2}}, Superpeers: []int{1, 2}, Assignment: []int{1, 1, 2, 1, 2}, Room: 3}
	one := a
	one.Wrong = 1
	two := a
	two.Wrong, two.Unserved = 1, 1
	three := two
	three.Unserved = 2
	full := three
	full.Room = 0
	if got := []int{a.InTransit(), one.InTransit(), two.InTransit(), three.InTransit(), full.InTransit()}; !slices.Equal(got, []int{0, 1, 2, 3, 1}) {
		t.Fatalf("in transit %v, want [0 1 2 3 1]", got)
	}
	if one.Converged() || !one.ConvergedWithin(1) || two.ConvergedWithin(1) || !two.ConvergedWithin(2) {
		t.Fatal("ConvergedWithin does not bound the clients in transit")
	}
	w := restWatch{period: 2 * s, transit: 2}
	steps := []struct {
		st       RepelState
		now      time.Duration
		done     bool
		max, end int
	}{
		{one, 0, false, 1, 1},       // first convergence within the allowance, rest from 0
		{three, 1 * s, false, 1, 1}, // one too many in transit: unconverged
		{two, 1500e6, false, 2, 2},  // from 1.5 s
		{a, 2500e6, false, 2, 0},
		{full, 3 * s, false, 2, 1}, // no room: the unserved wait for none
		{one, 3500e6, true, 2, 1},
	}
	for k, step := range steps {
		if got := w.see(step.st, step.now); got != step.done || w.InTransitMax != step.max || w.InTransitEnd != step.end {
			t.Fatalf("step %d at %v: rested %v with at most %d in transit, %d at the end; want %v, %d, %d", k, step.now, got, w.InTransitMax, w.InTransitEnd, step.done, step.max, step.end)
		}
	}
	if w.At != 1500*time.Millisecond || w.First != 0 {
		t.Fatalf("rested from %v (want 1.5s), first converged at %v (want 0)", w.At, w.First)
	}
}

// A state names the tokens it waits for, unsettled or unsurveyed, with
// their moves, while they are few; not at a selection's start.
func TestRepelState_StringNamesWaitingTokens(t *testing.T) {
	st := RepelState{Holders: [][]int{{1}, {2}, {3}}, Superpeers: []int{1, 2}, Unsettled: 1, Unsurveyed: 1,
		Waiting: []WaitingToken{{ID: 0, Moves: 7, Settled: true}, {ID: 2, Moves: 1}}}
	want := "waiting on token 0 unsurveyed after 7 moves, token 2 unsettled after 1 moves"
	if got := st.String(); !strings.HasSuffix(got, want) {
		t.Fatalf("%q, want it to end %q", got, want)
	}
	for i := range maxWaitingShown {
		st.Waiting = append(st.Waiting, WaitingToken{ID: uint32(3 + i)})
	}
	if got := st.String(); strings.Contains(got, "waiting on") {
		t.Fatalf("%q names %d waiting tokens, more than %d", got, len(st.Waiting), maxWaitingShown)
	}
}
