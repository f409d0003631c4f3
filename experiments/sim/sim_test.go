package sim

import (
	"context"
	"crypto/sha256"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/experiments/vivaldieval"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// tri is a hand-made 3-peer space: 0–1 10 ms, 1–2 20 ms, 0–2 40 ms.
func tri() latency.RTTs {
	d := [3][3]float64{{0, 10, 40}, {10, 0, 20}, {40, 20, 0}}
	return latency.NewMatrix("tri", 3, func(i, j int) float64 { return d[i][j] })
}

func TestNet_DelaysAndOrder(t *testing.T) {
	net := NewNet(tri())
	type got struct {
		what string
		at   time.Duration
	}
	var log []got
	note := func(what string) func() {
		return func() { log = append(log, got{what, net.Now()}) }
	}
	// At t=0, peer 0 sends to 2 (arrives at 20 ms) and to 1 (5 ms); peer 1
	// forwards on receipt to 2 (arrives at 5 + 10 = 15 ms) and replies to 0
	// (5 + 5 = 10 ms).
	net.Send(0, 2, note("0→2"))
	net.Send(0, 1, func() {
		note("0→1")()
		net.Send(1, 2, note("1→2"))
		net.Send(1, 0, note("1→0"))
	})
	// Two events at one instant run in the order scheduled.
	net.At(15*time.Millisecond, note("timer-a"))
	net.At(15*time.Millisecond, note("timer-b"))
	net.RunUntil(time.Second)
	want := []got{
		{"0→1", 5 * time.Millisecond},
		{"1→0", 10 * time.Millisecond},
		{"timer-a", 15 * time.Millisecond},
		{"timer-b", 15 * time.Millisecond},
		{"1→2", 15 * time.Millisecond},
		{"0→2", 20 * time.Millisecond},
	}
	if !reflect.DeepEqual(log, want) {
		t.Fatalf("events %v, want %v", log, want)
	}
	if net.Messages != 4 || net.Now() != time.Second || net.Pending() != 0 {
		t.Fatalf("messages %d, now %v, pending %d", net.Messages, net.Now(), net.Pending())
	}
	// An event scheduled in the past runs now, after those already due.
	net.At(0, note("late"))
	net.Step()
	if l := log[len(log)-1]; l.what != "late" || l.at != time.Second {
		t.Fatalf("late event ran as %v", l)
	}
}

func TestNet_MissingLinkDrops(t *testing.T) {
	m := latency.NewMatrix("gap", 2, func(i, j int) float64 { return latency.Missing })
	net := NewNet(m)
	if net.Send(0, 1, func() { t.Error("delivered over a missing link") }) {
		t.Fatal("Send over a missing link reported true")
	}
	net.RunUntil(time.Second)
}

func TestIdentities_MatchTheLiveSwarm(t *testing.T) {
	const n = 12
	pl, err := latency.Place(tri(), n, 5)
	if err != nil {
		t.Fatal(err)
	}
	s, err := swarm.New(context.Background(), swarm.Config{N: n, Seed: 5, RTT: pl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids, keys, err := Identities(5, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range s.Peers {
		if p.Host.ID() != ids[i] || p.Key != keys[i] {
			t.Fatalf("peer %d: swarm %s, sim %s", i, p.Host.ID(), ids[i])
		}
	}
	if one, _ := Identity(6, 0); one == ids[0] {
		t.Fatal("another seed gave the same identity")
	}
}

// naivePrefix is the reference: every peer's superpeer is the peer
// XOR-closest to sk(p) over all keys, found by brute force.
func naivePrefix(keys []dht.Key, scheme superpeer.Prefix) []int {
	set := map[int]bool{}
	for _, k := range keys {
		sk := scheme.SuperpeerKey(k)
		best := 0
		for j := range keys {
			if sk.Closer(keys[j], keys[best]) {
				best = j
			}
		}
		set[best] = true
	}
	var out []int
	for j := range set {
		out = append(out, j)
	}
	slices.Sort(out)
	return out
}

func TestPrefix_MatchesNaiveReference(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, n := range []int{1, 2, 7, 50, 300} {
		keys := make([]dht.Key, n)
		for i := range keys {
			rng.Read(keys[i][:])
		}
		for _, S := range []int{1, 3, 8, 16, 100} {
			for _, pow2 := range []bool{false, true} {
				var scheme superpeer.Prefix
				var err error
				if pow2 {
					scheme, err = superpeer.Pow2(bitsFor(S))
				} else {
					scheme, err = superpeer.Exact(S)
				}
				if err != nil {
					t.Fatal(err)
				}
				got := Prefix(keys, scheme, 0)
				if want := naivePrefix(keys, scheme); !slices.Equal(got.Superpeers, want) {
					t.Fatalf("n %d S %d pow2 %v: superpeers %v, want %v", n, S, pow2, got.Superpeers, want)
				}
				if c := OccupiedGroups(keys, scheme); c != len(got.Superpeers) {
					t.Fatalf("occupied groups %d, superpeers %d", c, len(got.Superpeers))
				}
				for i, a := range got.Assignment {
					if a != got.Leader[got.Group[i]] {
						t.Fatalf("peer %d assigned to %d, its group's superpeer is %d", i, a, got.Leader[got.Group[i]])
					}
				}
			}
		}
	}
}

func bitsFor(S int) int {
	k := 0
	for 1<<k < S {
		k++
	}
	return k
}

func TestPrefix_CapacityOverflowsToNearestGroups(t *testing.T) {
	_, keys, err := Identities(1, 400, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Exact(6): four groups of 1/8 of the key space and two of 1/4, so the
	// big groups hold about 100 peers, more than C; 6·C ≥ 400 leaves room.
	scheme, _ := superpeer.Exact(6)
	const C = 80
	r := Prefix(keys, scheme, C)
	load := map[int]int{}
	for i, a := range r.Assignment {
		if a < 0 {
			t.Fatalf("peer %d unserved with %d superpeers of capacity %d for 400 peers", i, len(r.Superpeers), C)
		}
		if a != i {
			load[a]++
		}
	}
	for sp, l := range load {
		if l > C {
			t.Fatalf("superpeer %d serves %d > %d", sp, l, C)
		}
	}
	if r.Overflow == 0 {
		t.Fatal("no client overflowed though the big groups hold about 100 > C")
	}
}

// The simulator and a live swarm agree: on one seed and S the live prefix
// selectors settle on exactly the superpeers the arithmetic names.
func TestPrefix_AgreesWithLiveSwarm(t *testing.T) {
	if testing.Short() {
		t.Skip("live swarm")
	}
	const n, S, seed = 60, 8, 11
	m, err := latency.Open(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), n, seed)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := swarm.New(ctx, swarm.Config{N: n, Seed: seed, RTT: pl})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConverged(ctx, 20); err != nil {
		t.Fatal(err)
	}
	if err := s.StartPrefix(ctx, superpeer.WithSuperpeers(S), superpeer.WithCapacity(2*n/S), superpeer.WithTTL(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}
	_, keys, err := Identities(seed, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	scheme, _ := superpeer.Exact(S)
	want := Prefix(keys, scheme, 0).Superpeers
	live := s.PrefixState().Superpeers
	if !slices.Equal(live, want) {
		t.Fatalf("live superpeers %v, simulator %v", live, want)
	}
	for _, sp := range live {
		if s.Peers[sp].Key != keys[sp] {
			t.Fatalf("superpeer %d: keys differ", sp)
		}
	}
}

func planetlab(t testing.TB, n int, seed int64) latency.RTTs {
	m, err := latency.Open(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), n, seed)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

func TestSimulateVivaldi_SameSeedSameNumbers(t *testing.T) {
	rtt := planetlab(t, 150, 2)
	run := func(seed int64) *VivaldiResult {
		r, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: seed, Rounds: 40, Checkpoints: []int{10, 20}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b, c := run(4), run(4), run(5)
	if !reflect.DeepEqual(a.Checkpoints, b.Checkpoints) || !reflect.DeepEqual(a.Coords, b.Coords) || a.Updates != b.Updates {
		t.Fatalf("same seed, different results: %v vs %v", a.Checkpoints, b.Checkpoints)
	}
	if reflect.DeepEqual(a.Coords, c.Coords) {
		t.Fatal("different seeds gave the same coordinates")
	}
	// The model refuses a few honest samples as implausible (its
	// defences against coordinate liars), nothing else.
	if a.Updates+a.Refused != 150*40 || a.Refused > 150*40/20 {
		t.Fatalf("updates %d refused %d, want %d in all and at most 5%% refused", a.Updates, a.Refused, 150*40)
	}
	if a.Checkpoints[0].Median <= a.Checkpoints[len(a.Checkpoints)-1].Median {
		t.Fatalf("error did not fall: %v", a.Checkpoints)
	}
}

// The simulator's Vivaldi (fixed near/random neighbours, coordinates that
// travel with delays) and vivaldieval (random peers, no delay) drive the
// same model; on PlanetLab their final median errors are within 0.05.
func TestSimulateVivaldi_AgreesWithEval(t *testing.T) {
	m, err := latency.Open(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	f := m.Filled()
	const rounds = 200
	sr, err := SimulateVivaldi(VivaldiOptions{RTT: f, Seed: 1, Rounds: rounds})
	if err != nil {
		t.Fatal(err)
	}
	er, err := vivaldieval.Run(vivaldieval.Options{Matrix: f, Rounds: rounds, Seed: 1, NoSerf: true})
	if err != nil {
		t.Fatal(err)
	}
	sim := sr.Checkpoints[len(sr.Checkpoints)-1].Median
	ev := er.Checkpoints[len(er.Checkpoints)-1].Median
	if d := sim - ev; d > 0.05 || d < -0.05 || sim > 0.15 {
		t.Fatalf("PlanetLab median error: simulator %.3f, vivaldieval %.3f (tolerance 0.05, ceiling 0.15)", sim, ev)
	}
	t.Logf("PlanetLab median relative error after %d rounds: simulator %.3f, vivaldieval %.3f", rounds, sim, ev)
}

func repelRun(t *testing.T, seed int64) *RepelResult {
	r, _ := repelRunWith(t, seed, func(*RepelOptions) {})
	return r
}

// repelRunWith is repelRun with options changed by opt; it returns the
// coordinates too.
func repelRunWith(t *testing.T, seed int64, opt func(*RepelOptions)) (*RepelResult, []vivaldi.Coord) {
	rtt := planetlab(t, 200, 3)
	vr, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: 3, Rounds: 60})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 200)
	for i := range ids {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		ids[i] = string(h[:8])
	}
	cfg := repel.DefaultConfig()
	cfg.Tokens = 6
	o := RepelOptions{RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: ids, Config: cfg, Seed: seed}
	opt(&o)
	r, err := SimulateRepel(o)
	if err != nil {
		t.Fatal(err)
	}
	return r, vr.Coords
}

func TestSimulateRepel_SettlesAndRepeats(t *testing.T) {
	a, b := repelRun(t, 9), repelRun(t, 9)
	if !a.Settled || len(a.Superpeers) != 6 {
		t.Fatalf("settled %v with %d holders, want 6 settled tokens", a.Settled, len(a.Superpeers))
	}
	if a.StepErrors != 0 {
		t.Fatalf("%d messages refused by the model", a.StepErrors)
	}
	if a.Events["minted"] < 6 || a.Messages["announce"] == 0 {
		t.Fatalf("events %v messages %v", a.Events, a.Messages)
	}
	if !reflect.DeepEqual(a.Superpeers, b.Superpeers) || !reflect.DeepEqual(a.Events, b.Events) || a.LoopEvents != b.LoopEvents || a.SettledSeconds != b.SettledSeconds ||
		!reflect.DeepEqual(a.Assignment, b.Assignment) || !reflect.DeepEqual(a.Traffic, b.Traffic) || a.Attach != b.Attach {
		t.Fatalf("same seed, different runs: %v %v vs %v %v", a.Superpeers, a.Events, b.Superpeers, b.Events)
	}
	for c, sp := range a.Assignment {
		if sp < 0 || !slices.Contains(a.Superpeers, sp) {
			t.Fatalf("peer %d assigned to %d, not a holder", c, sp)
		}
	}
}

// Under AttachSelector with a capacity no holder serves more than C, every
// client is served (S·C leaves room), and the traffic counters add up.
func TestSimulateRepel_CapacityAndTraffic(t *testing.T) {
	const C = 40 // 200 peers, 6 tokens: an even split is 33
	r, _ := repelRunWith(t, 9, func(o *RepelOptions) { o.Capacity = C })
	if !r.Settled || len(r.Superpeers) != 6 {
		t.Fatalf("settled %v with %d holders", r.Settled, len(r.Superpeers))
	}
	for k, l := range r.Assignment.Loads(r.Superpeers) {
		if l > C {
			t.Fatalf("holder %d serves %d > %d", r.Superpeers[k], l, C)
		}
	}
	for c, sp := range r.Assignment {
		if sp < 0 {
			t.Fatalf("client %d unserved", c)
		}
	}
	if r.Attach.Probes == 0 || r.Attach.Requests == 0 {
		t.Fatalf("attach stats %+v", r.Attach)
	}
	tr := r.Traffic
	var sends, bytes uint64
	for k, v := range tr.SendsByType {
		sends += v
		bytes += tr.BytesByType[k]
	}
	// Piggyback: every announcement is sent to the 5 other holders and
	// rides, digest-less, to the 199 other peers.
	if sends != tr.Sends || bytes != tr.Bytes || tr.SendsByType["announce"] != 5*uint64(r.Messages["announce"]) ||
		tr.SendsByType["move"] != uint64(r.Messages["move"]) || tr.BytesByType["announce"] <= 199*100*uint64(r.Messages["announce"]) {
		t.Fatalf("traffic %+v, messages %v", tr, r.Messages)
	}
	if tr.SettledSeconds <= 0 || tr.SettledSends == 0 || tr.SettledSends > tr.Sends {
		t.Fatalf("settled traffic %+v", tr)
	}
	// GossipSub: every announcement is sent to the 199 other peers.
	g, _ := repelRunWith(t, 9, func(o *RepelOptions) { o.Capacity = C; o.Dissemination = repel.GossipSub })
	if gt := g.Traffic; gt.SendsByType["announce"] != 199*uint64(g.Messages["announce"]) || gt.Bytes <= 100*gt.Sends {
		t.Fatalf("gossipsub traffic %+v, messages %v", gt, g.Messages)
	}
	// The earlier rule: the predicted-nearest holder, whatever the load.
	p, coords := repelRunWith(t, 9, func(o *RepelOptions) { o.Attach = AttachPredicted })
	if want := AssignPredicted(coords, p.Superpeers); !reflect.DeepEqual(p.Assignment, want) {
		t.Fatal("AttachPredicted: not the predicted-nearest holders")
	}
}

func TestSimulateRepel_RefusesBadInput(t *testing.T) {
	rtt := tri()
	cfg := repel.DefaultConfig()
	cfg.Tokens = 2
	cases := []RepelOptions{
		{RTT: rtt, IDs: []string{"a", "b"}, Config: cfg},
		{RTT: rtt, IDs: []string{"a", "a"}, Coords: make([]vivaldi.Coord, 2), Neighbors: make([][]int32, 2), Config: cfg},
	}
	for i, o := range cases {
		if _, err := SimulateRepel(o); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}
