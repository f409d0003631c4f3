package repel

import (
	"fmt"
	mrand "math/rand"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// The PlanetLab measurement: peers get Vivaldi coordinates from the real
// vivaldi.Client fed with RTT samples of the PlanetLab matrix, the token
// state machines run over a perfect in-memory network on virtual time until
// the tokens settle, clients attach to the superpeer with the lowest
// predicted RTT, and the client→superpeer RTT is read from the true matrix.
// Baselines: S random superpeers (same attach rule) and the centralised
// greedy k-median over the true matrix (clients attach to the truly nearest).
//
//	REPEL_PLANETLAB=1 go test ./repel/ -run TestPlanetLab -v
//	REPEL_PLANETLAB=1 REPEL_PLANETLAB_SEED=7 go test ./repel/ -run TestPlanetLab -v

const plSeed = 1

func plSeedFromEnv(t *testing.T) int64 {
	if s := os.Getenv("REPEL_PLANETLAB_SEED"); s != "" {
		var v int64
		if _, err := fmt.Sscan(s, &v); err != nil {
			t.Fatalf("REPEL_PLANETLAB_SEED: %v", err)
		}
		return v
	}
	return plSeed
}

// embed runs Vivaldi on the matrix: every peer keeps 16 near and 16 random
// neighbours (the mix of near and random peers vivaldi.Service samples) and
// samples one of them per round, alternating near and random.
func embed(t testing.TB, m latency.RTTs, seed int64, rounds int) (coords []vivaldi.Coord, nbrs [][]int) {
	n := m.Len()
	rng := mrand.New(mrand.NewSource(seed))
	cl := make([]*vivaldi.Client, n)
	nbrs = make([][]int, n)
	for i := range cl {
		c, err := vivaldi.NewClient(vivaldi.DefaultConfig(), mrand.New(mrand.NewSource(seed+int64(i))))
		if err != nil {
			t.Fatal(err)
		}
		cl[i] = c
		others := make([]int, 0, n-1)
		for j := 0; j < n; j++ {
			if j != i {
				others = append(others, j)
			}
		}
		slices.SortFunc(others, func(a, b int) int {
			da, db := m.RTT(i, a), m.RTT(i, b)
			switch {
			case da < db:
				return -1
			case da > db:
				return 1
			}
			return a - b
		})
		set := map[int]bool{}
		for _, j := range others[:16] {
			set[j] = true
			nbrs[i] = append(nbrs[i], j)
		}
		for len(nbrs[i]) < 32 {
			j := others[rng.Intn(len(others))]
			if !set[j] {
				set[j] = true
				nbrs[i] = append(nbrs[i], j)
			}
		}
	}
	order := rng.Perm(n)
	for r := 0; r < rounds; r++ {
		for _, i := range order {
			k := rng.Intn(16)
			if r%2 == 1 {
				k += 16
			}
			j := nbrs[i][k]
			rtt := time.Duration(m.RTT(i, j) * float64(time.Millisecond))
			if rtt <= 0 {
				continue
			}
			_ = cl[i].Update(fmt.Sprint(j), cl[j].GetCoordinate(), rtt)
		}
	}
	coords = make([]vivaldi.Coord, n)
	for i := range cl {
		coords[i] = cl[i].GetCoordinate()
	}
	return coords, nbrs
}

// relErrors is the median and p90 of |predicted − true| / true over all pairs.
func relErrors(m latency.RTTs, coords []vivaldi.Coord) (med, p90 float64) {
	var errs []float64
	for i := range coords {
		for j := i + 1; j < len(coords); j++ {
			tr := m.RTT(i, j)
			if tr <= 0 {
				continue
			}
			pr := coords[i].DistanceTo(coords[j]) * 1000
			errs = append(errs, abs(pr-tr)/tr)
		}
	}
	return metrics.Quantile(errs, 0.5), metrics.Quantile(errs, 0.9)
}

// plSim drives one Node per peer over a perfect network on virtual time.
// Messages produced in a round are delivered at its end (a gossip delay of
// one round), so holders that decide in the same round see each other's
// old positions, as they would on a real network.
type plSim struct {
	t       testing.TB
	cfg     Config
	coords  []vivaldi.Coord
	nbrs    [][]int
	partial bool // views: neighbours + attached clients, instead of everyone
	ids     []string
	index   map[string]int
	nodes   []*Node
	now     time.Time
	moves   int
}

func newPLSim(t testing.TB, cfg Config, coords []vivaldi.Coord, nbrs [][]int, partial bool, seed uint64) *plSim {
	s := &plSim{t: t, cfg: cfg, coords: coords, nbrs: nbrs, partial: partial, index: map[string]int{}, now: epoch0}
	for i := range coords {
		id := fmt.Sprintf("pl-%03d", i)
		nd, err := NewNode(id, PeerKey(id), cfg, rand.New(rand.NewPCG(seed, uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		nd.SetCoord(coords[i])
		s.ids = append(s.ids, id)
		s.index[id] = i
		s.nodes = append(s.nodes, nd)
	}
	s.setViews()
	return s
}

func (s *plSim) peer(i int) Peer {
	return Peer{ID: s.ids[i], Key: PeerKey(s.ids[i]), Coord: s.coords[i]}
}

// setViews tells every node whom it knows. Full: everyone. Partial: its
// Vivaldi neighbours, plus, for a holder, the clients attached to it (those
// whose predicted-nearest token it holds) — what a real peer knows.
func (s *plSim) setViews() {
	if !s.partial {
		all := make([]Peer, len(s.ids))
		for i := range all {
			all[i] = s.peer(i)
		}
		for _, nd := range s.nodes {
			nd.SetPeers(all)
		}
		return
	}
	hs := s.holders()
	attached := map[int][]int{}
	if len(hs) > 0 {
		for c := range s.coords {
			attached[nearestPredicted(s.coords, c, hs)] = append(attached[nearestPredicted(s.coords, c, hs)], c)
		}
	}
	for i, nd := range s.nodes {
		set := map[int]bool{i: true}
		var view []Peer
		for _, j := range attached[i] {
			if !set[j] {
				set[j] = true
				p := s.peer(j)
				p.Attached = true
				view = append(view, p)
			}
		}
		for _, j := range s.nbrs[i] {
			if !set[j] {
				set[j] = true
				view = append(view, s.peer(j))
			}
		}
		nd.SetPeers(view)
	}
}

func (s *plSim) holders() []int {
	var out []int
	for i, nd := range s.nodes {
		if _, ok := nd.Held(); ok {
			out = append(out, i)
		}
	}
	return out
}

func (s *plSim) settled() bool {
	ids := map[uint32]bool{}
	for _, nd := range s.nodes {
		if t, ok := nd.Held(); ok {
			if ids[t.ID] || nd.Role() != superpeer.Superpeer || nd.Moving() {
				return false
			}
			ids[t.ID] = true
		}
	}
	return len(ids) == s.cfg.Tokens
}

// run returns the holders once the tokens have settled and no move has
// happened for quiet, or after limit of virtual time.
func (s *plSim) run(dt, quiet, limit time.Duration) (holders []int, took time.Duration) {
	var queue []Message
	lastMove := s.now
	for s.now.Sub(epoch0) < limit {
		s.now = s.now.Add(dt)
		if s.partial && int(s.now.Sub(epoch0)/dt)%10 == 0 {
			s.setViews()
		}
		for _, nd := range s.nodes {
			queue = s.absorb(queue, nd.Tick(s.now), &lastMove)
		}
		batch := queue
		queue = nil
		for _, m := range batch {
			if m.To != "" {
				r, err := s.nodes[s.index[m.To]].Step(s.now, m)
				if err != nil {
					s.t.Fatal(err)
				}
				queue = s.absorb(queue, r, &lastMove)
				continue
			}
			for i, nd := range s.nodes {
				if s.ids[i] == m.From {
					continue
				}
				r, err := nd.Step(s.now, m)
				if err != nil {
					s.t.Fatalf("%v: %+v", err, m.Token.Digest)
				}
				queue = s.absorb(queue, r, &lastMove)
			}
		}
		if s.settled() && s.now.Sub(lastMove) >= quiet {
			break
		}
	}
	return s.holders(), s.now.Sub(epoch0)
}

func (s *plSim) absorb(q []Message, r Ready, lastMove *time.Time) []Message {
	for _, e := range r.Events {
		if e.Kind == EventMovedAway {
			s.moves++
			*lastMove = s.now
		}
	}
	return append(q, r.Messages...)
}

func nearestPredicted(coords []vivaldi.Coord, c int, sps []int) int {
	best, bd := -1, 0.0
	for _, s := range sps {
		if d := coords[c].DistanceTo(coords[s]); best < 0 || d < bd {
			best, bd = s, d
		}
	}
	return best
}

// clientRTTs is the true RTT (ms) of every non-superpeer to the superpeer it
// attaches to: the predicted-nearest if coords is given, else the truly
// nearest.
func clientRTTs(m latency.RTTs, coords []vivaldi.Coord, sps []int) []float64 {
	isSP := map[int]bool{}
	for _, s := range sps {
		isSP[s] = true
	}
	var out []float64
	for c := 0; c < m.Len(); c++ {
		if isSP[c] {
			continue
		}
		var sp int
		if coords != nil {
			sp = nearestPredicted(coords, c, sps)
		} else {
			sp = sps[0]
			for _, s := range sps {
				if m.RTT(c, s) < m.RTT(c, sp) {
					sp = s
				}
			}
		}
		out = append(out, m.RTT(c, sp))
	}
	return out
}

// probeRTTs is clientRTTs with a smarter attach: the client ranks the
// superpeers by predicted RTT, measures the k best (one ping each) and
// attaches to the lowest measured. It shows how much of the gap to the
// k-median is the embedding's error at attach time rather than placement.
func probeRTTs(m latency.RTTs, coords []vivaldi.Coord, sps []int, k int) []float64 {
	isSP := map[int]bool{}
	for _, s := range sps {
		isSP[s] = true
	}
	var out []float64
	for c := 0; c < m.Len(); c++ {
		if isSP[c] {
			continue
		}
		ranked := slices.Clone(sps)
		slices.SortFunc(ranked, func(a, b int) int {
			da, db := coords[c].DistanceTo(coords[a]), coords[c].DistanceTo(coords[b])
			switch {
			case da < db:
				return -1
			case da > db:
				return 1
			}
			return 0
		})
		best := m.RTT(c, ranked[0])
		for _, s := range ranked[1:min(k, len(ranked))] {
			best = min(best, m.RTT(c, s))
		}
		out = append(out, best)
	}
	return out
}

// plScore is one placement's client RTTs: mean and p90 with predicted
// attach, mean with probe-3 attach. Several runs average field by field.
type plScore struct{ mean, p90, probe float64 }

func scoreOf(m latency.RTTs, coords []vivaldi.Coord, sps []int) plScore {
	x := clientRTTs(m, coords, sps)
	return plScore{metrics.Mean(x), metrics.Quantile(x, 0.9), metrics.Mean(probeRTTs(m, coords, sps, 3))}
}

func average(ss []plScore) plScore {
	var a plScore
	for _, s := range ss {
		a.mean += s.mean / float64(len(ss))
		a.p90 += s.p90 / float64(len(ss))
		a.probe += s.probe / float64(len(ss))
	}
	return a
}

type plRow struct {
	method string
	S      int
	plScore
	note string
}

// TestPlanetLab is the measurement behind the numbers in the package doc.
// It takes ~40 s of CPU, so it runs only when asked:
//
//	REPEL_PLANETLAB=1 go test ./repel/ -run TestPlanetLab -v
func TestPlanetLab(t *testing.T) {
	if os.Getenv("REPEL_PLANETLAB") == "" {
		t.Skip("measurement; set REPEL_PLANETLAB=1")
	}
	seed := plSeedFromEnv(t)
	mat, err := latency.Open("planetlab-490")
	if err != nil {
		t.Fatal(err)
	}
	f := mat.Filled()
	start := time.Now()
	coords, nbrs := embed(t, f, seed, 400)
	med, p90 := relErrors(f, coords)
	t.Logf("PlanetLab n=%d, Vivaldi %dD+height (vivaldi.DefaultConfig, 400 rounds, 16 near + 16 random neighbours), median relative error %.3f, p90 %.3f (embed %v)", f.Len(), len(coords[0].Vec), med, p90, time.Since(start).Round(time.Millisecond))

	const sims = 5 // token-sim seeds averaged per row
	var rows []plRow
	kmedAll := metrics.GreedyKMedian(f, 32)
	pred := predictedRTTs(coords)
	kmedPred := metrics.GreedyKMedian(pred, 32)
	for _, S := range []int{8, 16, 32} {
		// The k-median clients attach to the truly nearest superpeer:
		// the centralised near-optimum the goal is stated against.
		x := clientRTTs(f, nil, kmedAll[:S])
		rows = append(rows, plRow{"kmedian-greedy (true RTT)", S, plScore{metrics.Mean(x), metrics.Quantile(x, 0.9), metrics.Mean(x)}, "centralised; true-nearest attach"})
		rows = append(rows, plRow{"kmedian-greedy, pred. attach", S, scoreOf(f, coords, kmedAll[:S]), "same superpeers, clients attach by prediction"})
		rows = append(rows, plRow{"kmedian-greedy on embedding", S, scoreOf(f, coords, kmedPred[:S]), "centralised, predicted RTTs"})
		rows = append(rows, plRow{"local search on embedding", S, scoreOf(f, coords, localSearch(pred, kmedPred[:S])), "centralised swaps from that greedy"})
		rng := mrand.New(mrand.NewSource(seed))
		var rs []plScore
		for range 50 {
			rs = append(rs, scoreOf(f, coords, metrics.RandomSuperpeers(f.Len(), S, rng)))
		}
		rows = append(rows, plRow{"random", S, average(rs), "mean of 50 draws"})
		for _, v := range []struct {
			name    string
			model   Model
			partial bool
		}{
			{"repulsion 1/d², to rest", Repulsion, false},
			{"attract, full view", Attract, false},
			{"attract, nbrs+clients view", Attract, true},
		} {
			cfg := DefaultConfig()
			cfg.Tokens = S
			cfg.Model = v.model
			var ss []plScore
			moves, took := 0, time.Duration(0)
			t0 := time.Now()
			for sim := range sims {
				ps := newPLSim(t, cfg, coords, nbrs, v.partial, uint64(seed)*100+uint64(sim))
				sps, d := ps.run(500*time.Millisecond, 3*cfg.SettleAfter, 3*time.Hour)
				if len(sps) != S {
					t.Fatalf("%s S=%d: %d holders", v.name, S, len(sps))
				}
				ss = append(ss, scoreOf(f, coords, sps))
				moves += ps.moves
				took = max(took, d)
				t.Logf("%s S=%d sim %d: mean %.1f ms, %d moves, quiet by %v virtual", v.name, S, sim, ss[len(ss)-1].mean, ps.moves, d.Round(time.Second))
			}
			rows = append(rows, plRow{v.name, S, average(ss), fmt.Sprintf("%d sims: %.0f moves each, quiet by %v virtual; %v wall", sims, float64(moves)/sims, took.Round(time.Second), time.Since(t0).Round(time.Millisecond))})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-29s %3s %8s %8s %6s %6s | %8s %6s %6s  %s\n", "method (predicted attach)", "S", "mean ms", "p90 ms", "/kmed", "/rand", "probe-3", "/kmed", "/rand", "")
	for _, r := range rows {
		var k, rnd plRow
		for _, o := range rows {
			if o.S == r.S && o.method == "kmedian-greedy (true RTT)" {
				k = o
			}
			if o.S == r.S && o.method == "random" {
				rnd = o
			}
		}
		fmt.Fprintf(&b, "%-29s %3d %8.1f %8.1f %6.2f %6.2f | %8.1f %6.2f %6.2f  %s\n", r.method, r.S, r.mean, r.p90, r.mean/k.mean, r.mean/rnd.mean, r.probe, r.probe/k.mean, r.probe/rnd.probe, r.note)
		if strings.HasPrefix(r.method, "attract") {
			// Regression guards, looser than the goal (1.15× k-median,
			// 0.6× random), which predicted attach cannot reach at S=32:
			// see the "kmedian-greedy, pred. attach" row.
			if r.mean > 0.65*rnd.mean || r.mean > 1.45*k.mean {
				t.Errorf("%s S=%d: mean %.1f ms regressed (k-median %.1f, random %.1f)", r.method, r.S, r.mean, k.mean, rnd.mean)
			}
		}
	}
	t.Log(b.String())
}

// predictedRTTs is the embedding as an RTT matrix (ms).
func predictedRTTs(coords []vivaldi.Coord) *latency.Matrix {
	return latency.NewMatrix("predicted", len(coords), func(i, j int) float64 { return coords[i].DistanceTo(coords[j]) * 1000 })
}

// localSearch improves a k-median solution by single swaps (move one
// facility to any peer) until none lowers the cost: the centralised version
// of what the Attract tokens do.
func localSearch(m latency.RTTs, sps []int) []int {
	sps = slices.Clone(sps)
	for {
		cur := metrics.KMedianCost(m, sps)
		improved := false
		for i := range sps {
			best, bc := sps[i], cur
			for c := 0; c < m.Len(); c++ {
				if slices.Contains(sps, c) {
					continue
				}
				old := sps[i]
				sps[i] = c
				if v := metrics.KMedianCost(m, sps); v < bc-1e-9 {
					best, bc = c, v
				}
				sps[i] = old
			}
			if best != sps[i] {
				sps[i], cur, improved = best, bc, true
			}
		}
		if !improved {
			return sps
		}
	}
}
