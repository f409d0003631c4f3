package sim

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// The simulator and the live swarm agree (issue 6): on one matrix, seed and
// S, the prefix method picks the same superpeers (TestPrefix_AgreesWithLiveSwarm),
// and the Vivaldi and repel figures lie within the tolerances below. Each
// tolerance was measured by running the test over several seeds
// (-agree.seeds; experiments/README.md, "Simulator vs live swarm", has the
// per-seed numbers) and set with a margin over the largest difference seen:
// a live swarm's figures move with the scheduling of a loaded machine, the
// simulator's are a function of the seed.
var agreeSeeds = flag.String("agree.seeds", "", "comma-separated seeds for the simulator-vs-live agreement tests (default: each test's own); to re-measure their tolerances")

func seedsOr(t *testing.T, def int64) []int64 {
	if *agreeSeeds == "" {
		return []int64{def}
	}
	var out []int64
	for _, f := range strings.Split(*agreeSeeds, ",") {
		s, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || s == 0 {
			t.Fatalf("-agree.seeds: bad seed %q", f)
		}
		out = append(out, s)
	}
	return out
}

func planetlabPlaced(t *testing.T, n int, seed int64) *latency.Placement {
	t.Helper()
	m, err := latency.Builtin(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), n, seed)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// liveSwarm builds, joins and converges a swarm on pl, its nodes built with
// opts. It is closed when the test ends.
func liveSwarm(t *testing.T, ctx context.Context, pl *latency.Placement, seed int64, opts []dht.Option) *swarm.Swarm {
	t.Helper()
	s, err := swarm.New(ctx, swarm.Config{N: pl.Len(), Seed: seed, RTT: pl, HostOf: pl.Host, NodeOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConverged(ctx, 20); err != nil {
		t.Fatal(err)
	}
	return s
}

// liveCoords runs the coordinate protocol on every peer of s until every
// peer has taken at least k RTT samples, and returns their coordinates
// then (and the mean samples per peer). The services keep running.
//
// A live peer starts a sample about every interval without waiting for the
// last reply, as every simulated peer sends one request per round. (When
// each peer waited for its reply, a peer far from the others — PlanetLab's
// hosts in Asia and Oceania, 200–300 ms from most — took a third of the
// samples of one in a dense region, and waiting for the mean to reach k
// left those peers badly placed.) Waiting for the least to reach k gives
// every peer at least the simulator's k.
func liveCoords(t *testing.T, ctx context.Context, s *swarm.Swarm, seed int64, interval time.Duration, k int) (*swarm.VivaldiRun, []vivaldi.Coord, float64) {
	t.Helper()
	v, err := s.StartVivaldi(swarm.VivaldiOptions{Interval: interval, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	least := func() uint64 {
		m := uint64(math.MaxUint64)
		for i := range s.Peers {
			m = min(m, v.Service(i).Stats().Samples)
		}
		return m
	}
	for least() < uint64(k) {
		select {
		case <-ctx.Done():
			t.Fatalf("live Vivaldi: a peer has %d samples, want %d: %v", least(), k, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	coords := make([]vivaldi.Coord, len(s.Peers))
	for i := range coords {
		coords[i] = v.Coord(i)
	}
	return v, coords, v.Samples()
}

// constantError is the relative error of the trivial predictor that
// answers the median RTT of all pairs for every pair: what a coordinate
// system must beat by far to mean anything.
func constantError(rtt latency.RTTs) (median, p90 float64) {
	n := rtt.Len()
	var all []float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if d := rtt.RTT(i, j); d > 0 {
				all = append(all, d)
			}
		}
	}
	c := metrics.Percentiles(all, 0.5)[0]
	errs := make([]float64, len(all))
	for k, d := range all {
		errs[k] = math.Abs(c-d) / d
	}
	ps := metrics.Percentiles(errs, 0.5, 0.9)
	return ps[0], ps[1]
}

// nearAccuracy is how well coords know what is near, which is what a client
// choosing its superpeer needs: the median relative error over the tenth of
// all pairs with the lowest RTT, and the mean excess RTT (ms) of each peer's
// predicted-nearest peer over its true nearest (swarm.NearAccuracy, which
// peer swarm reports too).
func nearAccuracy(rtt latency.RTTs, coords []vivaldi.Coord) (nearMedian, excess float64) {
	return swarm.NearAccuracy(rtt, coords)
}

const (
	// agreeVivaldiN peers, each taking agreeVivaldiSamples RTT samples: the
	// simulator runs that many rounds; the live peers start a sample about
	// every agreeVivaldiInterval until each has taken at least as many
	// (liveCoords).
	agreeVivaldiN       = 80
	agreeVivaldiSamples = 120
	// Every 100 ms: at 40 ms the 80 peers' 2000 exchanges a second loaded
	// the machine enough to lengthen the samples (p90 overhead of the near
	// neighbours' least RTT 1.4 → 4.3 ms on 100 peers) and the live
	// embedding lost to the simulator's.
	agreeVivaldiInterval = 100 * time.Millisecond

	// vivaldiMedianTolerance bounds |live − simulator| median relative
	// error. Measured over seeds 1–5: 0.0038, 0.0073, 0.0002, 0.0011,
	// 0.0124 (the medians themselves 0.063–0.076); 0.03 is 2.4× the
	// largest.
	vivaldiMedianTolerance = 0.03
	// vivaldiP90Tolerance bounds |live − simulator| p90 relative error.
	// Measured over seeds 1–5: 0.0006, 0.0032, 0.0312, 0.0302, 0.0455 (the
	// p90s 0.18–0.24, live the higher on four seeds); 0.08 is 1.75× the
	// largest.
	vivaldiP90Tolerance = 0.08
	// vivaldiTrivialShare: both medians must be under this share of the
	// constant predictor's median error (0.44–0.50 on seeds 1–5, where
	// both embeddings reached 0.06–0.08), so that two broken embeddings
	// cannot pass by agreeing with each other.
	vivaldiTrivialShare = 0.4
)

type vivaldiAgreement struct {
	simMed, simP90, liveMed, liveP90 float64
	trivMed                          float64
	simNear, simExcess               float64
	liveNear, liveExcess             float64
}

func runVivaldiAgreement(t *testing.T, seed int64) vivaldiAgreement {
	t.Helper()
	pl := planetlabPlaced(t, agreeVivaldiN, seed)
	var a vivaldiAgreement
	a.trivMed, _ = constantError(pl)

	sr, err := SimulateVivaldi(VivaldiOptions{RTT: pl, Seed: seed, Rounds: agreeVivaldiSamples})
	if err != nil {
		t.Fatal(err)
	}
	last := sr.Checkpoints[len(sr.Checkpoints)-1]
	a.simMed, a.simP90 = last.Median, last.P90
	a.simNear, a.simExcess = nearAccuracy(pl, sr.Coords)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	s := liveSwarm(t, ctx, pl, seed, nil)
	ready := time.Since(start)
	_, coords, samples := liveCoords(t, ctx, s, seed, agreeVivaldiInterval, agreeVivaldiSamples)
	a.liveMed, a.liveP90 = CoordErrors(pl, coords, nil)
	a.liveNear, a.liveExcess = nearAccuracy(pl, coords)
	t.Logf("seed %d, %d peers, %d samples per peer: median error simulator %.4f, live %.4f (|Δ| %.4f); p90 simulator %.4f, live %.4f (|Δ| %.4f); constant predictor median %.3f",
		seed, agreeVivaldiN, agreeVivaldiSamples, a.simMed, a.liveMed, math.Abs(a.liveMed-a.simMed), a.simP90, a.liveP90, math.Abs(a.liveP90-a.simP90), a.trivMed)
	t.Logf("seed %d: nearest tenth of pairs, median error simulator %.3f, live %.3f; predicted-nearest peer's excess RTT simulator %.1f ms, live %.1f ms; live swarm ready in %.1f s, at least %d samples per peer (%.1f on average) after %.1f s more",
		seed, a.simNear, a.liveNear, a.simExcess, a.liveExcess, ready.Seconds(), agreeVivaldiSamples, samples, (time.Since(start) - ready).Seconds())
	return a
}

// TestVivaldi_AgreesWithLiveSwarm: on PlanetLab, seed 1, 80 peers and at
// least 120 samples per peer, the simulator's Vivaldi and a live swarm's (the
// real coordinate protocol over mocknet links with the matrix latencies)
// reach median and p90 relative errors within the stated tolerances of each
// other, both far below the constant predictor's.
func TestVivaldi_AgreesWithLiveSwarm(t *testing.T) {
	if testing.Short() {
		t.Skip("live swarm")
	}
	var maxMed, maxP90 float64
	for _, seed := range seedsOr(t, 1) {
		// One subtest per seed, so that each seed's swarm is closed
		// before the next starts: swarms left sampling would load the
		// machine and lengthen every later seed's RTT samples.
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			a := runVivaldiAgreement(t, seed)
			dMed, dP90 := math.Abs(a.liveMed-a.simMed), math.Abs(a.liveP90-a.simP90)
			maxMed, maxP90 = max(maxMed, dMed), max(maxP90, dP90)
			if dMed > vivaldiMedianTolerance {
				t.Errorf("seed %d: median error live %.4f, simulator %.4f: differ by %.4f > %.3f", seed, a.liveMed, a.simMed, dMed, vivaldiMedianTolerance)
			}
			if dP90 > vivaldiP90Tolerance {
				t.Errorf("seed %d: p90 error live %.4f, simulator %.4f: differ by %.4f > %.3f", seed, a.liveP90, a.simP90, dP90, vivaldiP90Tolerance)
			}
			if bound := vivaldiTrivialShare * a.trivMed; a.simMed > bound || a.liveMed > bound {
				t.Errorf("seed %d: median error simulator %.4f, live %.4f: not under %.2f × the constant predictor's %.4f", seed, a.simMed, a.liveMed, vivaldiTrivialShare, a.trivMed)
			}
		})
	}
	t.Logf("largest |live − simulator|: median %.4f (tolerance %.3f), p90 %.4f (tolerance %.3f)", maxMed, vivaldiMedianTolerance, maxP90, vivaldiP90Tolerance)
}

const (
	// agreeRepelN peers, agreeRepelS tokens. Both sides run
	// swarm.RepelSwarmConfig(S, repel.Attract) with no capacity (to
	// compare the token method itself, not the overflow), over coordinates after agreeRepelSamples Vivaldi
	// samples per peer (the live peers then keep sampling every 2 s, as
	// experiments/swarm's repel tests do; the simulator's coordinates stay
	// fixed).
	agreeRepelN        = 100
	agreeRepelS        = 8
	agreeRepelSamples  = 60
	agreeRepelInterval = 100 * time.Millisecond
	// agreeRepelTTL is the live attachments' TTL; agreeRepelRest is how long
	// the live selection must rest before it is scored: 1.5 renewal
	// intervals (the TTL's third), peer swarm's --rest default.
	agreeRepelTTL  = 12 * time.Second
	agreeRepelRest = agreeRepelTTL / 2

	// repelRTTTolerance bounds the ratio of the two mean client→superpeer
	// RTTs (true, from the matrix), larger over smaller, minus 1. Both
	// sides' clients choose their holder with repel.Chooser (the simulator
	// by AttachSelector, measuring the true RTT), with no capacity.
	// Measured over seeds 1–5: 1.047, 1.121, 1.089, 1.039, 1.034, the live
	// swarm always the worse (its coordinates place latency-near peers a
	// little worse). 0.3 is 2.5× the largest excess; 8 random superpeers
	// with every client on its nearest are 1.41–1.72× the simulator here.
	repelRTTTolerance = 0.3
	// repelHalfTolerance bounds the same ratio between the live repel and
	// the simulator's repel over the live coordinates (as they were when
	// selection started): the token method's half of the agreement,
	// without the embedding's. Measured over seeds 1–5: 1.058, 1.003,
	// 1.191, 1.072, 1.004 — a run of the token method from the same
	// coordinates lands on a different set of 8 sites, so this half is as
	// noisy as the whole; 0.3 is 1.6× the largest excess.
	repelHalfTolerance = 0.3
	// repelLoadTolerance bounds |live − simulator| of the largest number of
	// clients on one superpeer (with no capacity, about 22–45 of the 92
	// clients). Measured over seeds 1–5: 1, 21, 5, 8, 0; 30 is 1.4× the
	// largest.
	repelLoadTolerance = 30
	// repelRandomDraws random S-superpeer selections, each client sent to
	// its nearest by true RTT, make the baseline: both methods' mean client
	// RTT must be below the baseline's mean (measured over seeds 1–5:
	// simulator 0.58–0.71 of it, live 0.65–0.70). Their largest load must be
	// under repelLoadCeiling of the clients: a broken one piles them up.
	repelRandomDraws = 50
	repelLoadCeiling = 0.5
)

type repelAgreement struct {
	simRTT, liveRTT        float64
	simMax, liveMax        int
	randomRTT, randomMax   float64
	simOnLiveRTT           float64
	simOnLiveMax           int
	simSettled, liveSettle float64
}

func runRepelAgreement(t *testing.T, seed int64) repelAgreement {
	t.Helper()
	const n, S = agreeRepelN, agreeRepelS
	pl := planetlabPlaced(t, n, seed)
	var a repelAgreement
	ids, _, err := Identities(seed, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	idStrs := make([]string, n)
	for i, id := range ids {
		idStrs[i] = string(id)
	}
	cfg := swarm.RepelSwarmConfig(S, repel.Attract)
	// The live selector ticks its model every quarter of its shortest timer
	// (500 ms) and hands it its view every MoveInterval; the simulator runs
	// on the same clock.
	simRepel := func(coords []vivaldi.Coord, nbrs [][]int32) (*RepelResult, metrics.Evaluation) {
		r, err := SimulateRepel(RepelOptions{
			RTT: pl, Coords: coords, Neighbors: nbrs, IDs: idStrs, Config: cfg, Seed: seed,
			TickEvery: 500 * time.Millisecond, ViewEvery: cfg.MoveInterval,
			// The live selector's own rule (repel.Chooser), no capacity,
			// as the live swarm runs it.
			Attach: AttachSelector,
		})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := metrics.Evaluate(pl, r.Assignment, r.Superpeers, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r, ev
	}
	start := time.Now()
	vr, err := SimulateVivaldi(VivaldiOptions{RTT: pl, Seed: seed, Rounds: agreeRepelSamples})
	if err != nil {
		t.Fatal(err)
	}
	rr, sev := simRepel(vr.Coords, vr.Neighbors)
	if !rr.Settled || len(rr.Superpeers) != S {
		t.Fatalf("seed %d: simulator settled %v with %d holders, want %d", seed, rr.Settled, len(rr.Superpeers), S)
	}
	simWall := time.Since(start)
	a.simRTT, a.simMax, a.simSettled = sev.ClientRTT.Mean, sev.Load.Max, rr.SettledSeconds
	simNear, simExcess := nearAccuracy(pl, vr.Coords)

	// The random baseline (and the greedy k-median, for the log), on the
	// true RTTs.
	rng := rand.New(rand.NewSource(seed))
	for d := 0; d < repelRandomDraws; d++ {
		sps := metrics.RandomSuperpeers(n, S, rng)
		ev, err := metrics.Evaluate(pl, metrics.AssignNearest(pl, sps), sps, 0)
		if err != nil {
			t.Fatal(err)
		}
		a.randomRTT += ev.ClientRTT.Mean / repelRandomDraws
		a.randomMax += float64(ev.Load.Max) / repelRandomDraws
	}
	km := metrics.GreedyKMedian(pl, S)
	kev, err := metrics.Evaluate(pl, metrics.AssignNearest(pl, km), km, 0)
	if err != nil {
		t.Fatal(err)
	}

	// The live swarm: the DHT nodes, the coordinate protocol until the
	// peers have taken as many samples as the simulator's, then slower
	// sampling, and the selectors.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start = time.Now()
	s := liveSwarm(t, ctx, pl, seed, nil)
	ready := time.Since(start)
	v, coords, samples := liveCoords(t, ctx, s, seed, agreeRepelInterval, agreeRepelSamples)
	coordsAt := time.Since(start)
	v.SetInterval(2 * time.Second)
	r, err := s.StartRepel(ctx, v, swarm.RepelOptions{Config: cfg, TTL: agreeRepelTTL, Seed: seed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	// Scored once the selection has rested (converged, with the same
	// holder of every token, for 1.5 renewal intervals), as peer swarm
	// scores it: a first convergence can catch the clients of a token that
	// has just moved at whichever holder had room.
	rest, err := r.WaitAtRest(ctx, r.Start(), agreeRepelRest, 0)
	if err != nil {
		t.Fatalf("seed %d: live: %v", seed, err)
	}
	a.liveSettle = rest.At.Seconds()
	st := r.State()
	if len(st.Superpeers) != S {
		t.Fatalf("seed %d: live: %d superpeers, want %d", seed, len(st.Superpeers), S)
	}
	lev, err := s.Evaluate(st.Assignment, st.Superpeers, 0, S)
	if err != nil {
		t.Fatal(err)
	}
	a.liveRTT, a.liveMax = lev.ClientRTT.Mean, lev.Load.Max
	liveNear, liveExcess := nearAccuracy(pl, coords)

	// The simulator's repel over the live coordinates (as they were when
	// selection started) separates the two halves of any difference: the
	// token method's and the embedding's.
	_, oev := simRepel(coords, vr.Neighbors)
	a.simOnLiveRTT, a.simOnLiveMax = oev.ClientRTT.Mean, oev.Load.Max
	common := 0
	for _, sp := range st.Superpeers {
		if slices.Contains(rr.Superpeers, sp) {
			common++
		}
	}
	t.Logf("seed %d, %d peers, S %d: client RTT mean simulator %.2f ms, live %.2f ms (ratio %.3f); load max simulator %d, live %d; %d random superpeers %.2f ms, load max %.1f; greedy k-median %.2f ms; %d superpeers in common",
		seed, n, S, a.simRTT, a.liveRTT, max(a.simRTT, a.liveRTT)/min(a.simRTT, a.liveRTT), a.simMax, a.liveMax, S, a.randomRTT, a.randomMax, kev.ClientRTT.Mean, common)
	t.Logf("seed %d: the simulator's repel over the live coordinates %.2f ms, load max %d; nearest tenth of pairs, median error simulator %.3f, live %.3f; predicted-nearest excess RTT simulator %.1f ms, live %.1f ms",
		seed, a.simOnLiveRTT, a.simOnLiveMax, simNear, liveNear, simExcess, liveExcess)
	t.Logf("seed %d: settled after %.0f s virtual in the simulator (%.1f s wall), live at rest from %.1f s; live swarm ready in %.1f s, coordinates (at least %d samples per peer, %.1f on average) in %.1f s more",
		seed, a.simSettled, simWall.Seconds(), a.liveSettle, ready.Seconds(), agreeRepelSamples, samples, (coordsAt - ready).Seconds())
	return a
}

// TestRepel_AgreesWithLiveSwarm: on PlanetLab, seed 3, 100 peers and
// S = 8, the simulator's repel method (over its own Vivaldi) and a live
// swarm's (the real protocols) both settle to exactly S superpeers, with
// mean client→superpeer RTT and largest load within the stated tolerances
// of each other, and both beat S random superpeers.
func TestRepel_AgreesWithLiveSwarm(t *testing.T) {
	if testing.Short() {
		t.Skip("live swarm")
	}
	var maxRatio, maxHalf float64
	var maxLoad int
	// Seed 3: of the five seeds measured, its live figure lay furthest
	// below the random baseline's (0.83 of it; seed 1's 0.92), so that a
	// slow run on a loaded machine does not cross it.
	for _, seed := range seedsOr(t, 3) {
		// One subtest per seed, each seed's swarm closed before the next.
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			a := runRepelAgreement(t, seed)
			ratio := max(a.simRTT, a.liveRTT) / min(a.simRTT, a.liveRTT)
			dLoad := a.simMax - a.liveMax
			if dLoad < 0 {
				dLoad = -dLoad
			}
			maxRatio, maxLoad = max(maxRatio, ratio), max(maxLoad, dLoad)
			if ratio-1 > repelRTTTolerance {
				t.Errorf("seed %d: mean client RTT live %.2f ms, simulator %.2f ms: ratio %.3f > 1 + %.2f", seed, a.liveRTT, a.simRTT, ratio, repelRTTTolerance)
			}
			half := max(a.simOnLiveRTT, a.liveRTT) / min(a.simOnLiveRTT, a.liveRTT)
			maxHalf = max(maxHalf, half)
			if half-1 > repelHalfTolerance {
				t.Errorf("seed %d: mean client RTT live %.2f ms, simulator over the live coordinates %.2f ms: ratio %.3f > 1 + %.2f", seed, a.liveRTT, a.simOnLiveRTT, half, repelHalfTolerance)
			}
			if dLoad > repelLoadTolerance {
				t.Errorf("seed %d: largest load live %d, simulator %d: differ by %d > %d", seed, a.liveMax, a.simMax, dLoad, repelLoadTolerance)
			}
			if a.simRTT >= a.randomRTT || a.liveRTT >= a.randomRTT {
				t.Errorf("seed %d: mean client RTT simulator %.2f ms, live %.2f ms: not below %d random superpeers' %.2f ms", seed, a.simRTT, a.liveRTT, agreeRepelS, a.randomRTT)
			}
			if ceiling := int(repelLoadCeiling * float64(agreeRepelN-agreeRepelS)); a.simMax > ceiling || a.liveMax > ceiling {
				t.Errorf("seed %d: largest load simulator %d, live %d: over %d", seed, a.simMax, a.liveMax, ceiling)
			}
		})
	}
	t.Logf("largest RTT ratio %.3f (tolerance 1 + %.2f), over the live coordinates %.3f (tolerance 1 + %.2f); largest load difference %d (tolerance %d)",
		maxRatio, repelRTTTolerance, maxHalf, repelHalfTolerance, maxLoad, repelLoadTolerance)
}
