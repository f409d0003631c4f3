package vivaldieval

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/hashicorp/serf/coordinate"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Schedules.
const (
	ScheduleRandom    = "random"
	ScheduleNeighbors = "neighbors"
)

// NeighborCount is the size of each node's fixed neighbour set under the
// neighbors schedule.
const NeighborCount = 32

// DefaultCheckpoints are the rounds the result reports (plus the last one).
var DefaultCheckpoints = []int{10, 32, 100}

// Options describe one evaluation.
type Options struct {
	Matrix   latency.RTTs // ms; Missing pairs are never sampled nor scored
	Name     string       // for the result
	Rounds   int          // default 500
	Schedule string       // random (default) or neighbors
	Seed     int64
	// Config is ours; nil is vivaldi.DefaultConfig with Dims applied.
	Config *vivaldi.Config
	// Dims overrides Config.Dimensions when > 0.
	Dims int
	// Checkpoints (rounds) to score besides the last; nil is
	// DefaultCheckpoints. Rounds beyond Rounds are ignored.
	Checkpoints []int
	// Jitter multiplies each sample by (1 + Jitter·Exp(1)), the one-sided
	// queueing noise of a real RTT; 0 gives the matrix entry.
	Jitter float64
	// NoSerf skips the baseline (for tuning runs).
	NoSerf bool
}

// Checkpoint is the error at one round: relative error |predicted − true| /
// true over all unordered pairs with a known RTT.
type Checkpoint struct {
	Round      int     `json:"round"`
	Median     float64 `json:"median"`
	P90        float64 `json:"p90"`
	SerfMedian float64 `json:"serf_median"`
	SerfP90    float64 `json:"serf_p90"`
}

// Result of Run.
type Result struct {
	Matrix      string       `json:"matrix"`
	Seed        int64        `json:"seed"`
	Schedule    string       `json:"schedule"`
	Dims        int          `json:"dims"`
	SerfDims    int          `json:"serf_dims"`
	Nodes       int          `json:"nodes"`
	Rounds      int          `json:"rounds"`
	Jitter      float64      `json:"jitter,omitempty"`
	Samples     uint64       `json:"samples"`      // taken by ours: applied, or refused as implausible
	SerfSamples uint64       `json:"serf_samples"` // applied by serf
	Refused     uint64       `json:"refused"`      // refused by ours
	Implausible uint64       `json:"implausible"`  // of Samples, refused by ours as implausible (vivaldi.ErrImplausible)
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Run evaluates ours and serf on the same samples.
func Run(o Options) (*Result, error) {
	if o.Matrix == nil {
		return nil, errors.New("vivaldieval: no matrix")
	}
	n := o.Matrix.Len()
	if n < 2 {
		return nil, fmt.Errorf("vivaldieval: matrix has %d hosts, need at least 2", n)
	}
	if o.Rounds == 0 {
		o.Rounds = 500
	}
	if o.Rounds < 0 {
		return nil, fmt.Errorf("vivaldieval: rounds %d < 0", o.Rounds)
	}
	if o.Schedule == "" {
		o.Schedule = ScheduleRandom
	}
	if o.Schedule != ScheduleRandom && o.Schedule != ScheduleNeighbors {
		return nil, fmt.Errorf("vivaldieval: unknown schedule %q (random, neighbors)", o.Schedule)
	}
	if o.Jitter < 0 || math.IsNaN(o.Jitter) || math.IsInf(o.Jitter, 0) {
		return nil, fmt.Errorf("vivaldieval: jitter %v must be ≥ 0", o.Jitter)
	}
	cfg := vivaldi.DefaultConfig()
	if o.Config != nil {
		cfg = *o.Config
	}
	if o.Dims > 0 {
		cfg.Dimensions = o.Dims
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cps := o.Checkpoints
	if cps == nil {
		cps = DefaultCheckpoints
	}
	want := map[int]bool{o.Rounds: true}
	for _, r := range cps {
		if r > 0 && r <= o.Rounds {
			want[r] = true
		}
	}

	// Independent streams, so changing one (say the model's tie-breaking)
	// leaves the schedule the same.
	schedRng := rand.New(rand.NewSource(o.Seed))
	noiseRng := rand.New(rand.NewSource(o.Seed ^ 0x6a09e667))

	known := make([][]int, n) // peers with a known RTT, per node
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if j != i && o.Matrix.RTT(i, j) > 0 {
				known[i] = append(known[i], j)
			}
		}
	}
	peers := known
	if o.Schedule == ScheduleNeighbors {
		peers = make([][]int, n)
		for i := range known {
			k := append([]int(nil), known[i]...)
			schedRng.Shuffle(len(k), func(a, b int) { k[a], k[b] = k[b], k[a] })
			if len(k) > NeighborCount {
				k = k[:NeighborCount]
			}
			peers[i] = k
		}
	}

	ours := make([]*vivaldi.Client, n)
	for i := range ours {
		c, err := vivaldi.NewClient(cfg, rand.New(rand.NewSource(o.Seed*1_000_003+int64(i))))
		if err != nil {
			return nil, err
		}
		ours[i] = c
	}
	var serf []*coordinate.Client
	scfg := coordinate.DefaultConfig()
	if !o.NoSerf {
		setSerfRand(scfg, rand.New(rand.NewSource(o.Seed^0x5eef)))
		serf = make([]*coordinate.Client, n)
		for i := range serf {
			c, err := coordinate.NewClient(scfg)
			if err != nil {
				return nil, err
			}
			serf[i] = c
		}
	}

	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	res := &Result{
		Matrix: o.Name, Seed: o.Seed, Schedule: o.Schedule, Dims: cfg.Dimensions,
		SerfDims: int(scfg.Dimensionality), Nodes: n, Rounds: o.Rounds, Jitter: o.Jitter,
	}
	for round := 1; round <= o.Rounds; round++ {
		for i := 0; i < n; i++ {
			if len(peers[i]) == 0 {
				continue
			}
			j := peers[i][schedRng.Intn(len(peers[i]))]
			ms := o.Matrix.RTT(i, j)
			if o.Jitter > 0 {
				ms *= 1 + o.Jitter*noiseRng.ExpFloat64()
			}
			rtt := time.Duration(ms * float64(time.Millisecond))
			switch err := ours[i].Update(names[j], ours[j].GetCoordinate(), rtt); {
			case errors.Is(err, vivaldi.ErrImplausible):
				// Seen and judged a liar's by the model's defences.
				res.Samples++
				res.Implausible++
			case err != nil:
				res.Refused++
			default:
				res.Samples++
			}
			if serf != nil {
				if _, err := serf[i].Update(names[j], serf[j].GetCoordinate(), rtt); err == nil {
					res.SerfSamples++
				}
			}
		}
		if want[round] {
			cp := Checkpoint{Round: round}
			cp.Median, cp.P90 = score(o.Matrix, func(i, j int) float64 {
				return ours[i].DistanceTo(ours[j].GetCoordinate()).Seconds()
			})
			if serf != nil {
				cp.SerfMedian, cp.SerfP90 = score(o.Matrix, func(i, j int) float64 {
					return serf[i].DistanceTo(serf[j].GetCoordinate()).Seconds()
				})
			}
			res.Checkpoints = append(res.Checkpoints, cp)
		}
	}
	return res, nil
}

// score is the median and 90th percentile of the relative error of predict
// (seconds) over all unordered pairs with a known RTT.
func score(m latency.RTTs, predict func(i, j int) float64) (median, p90 float64) {
	n := m.Len()
	errs := make([]float64, 0, n*(n-1)/2)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			ms := m.RTT(i, j)
			if ms <= 0 {
				continue
			}
			truth := ms / 1000
			errs = append(errs, math.Abs(predict(i, j)-truth)/truth)
		}
	}
	// Sorted once, in place: a live swarm's warm-up scores its 2 000
	// peers' two million pairs every second of network time, and a copy
	// and a sort for each quantile was a burst of half a second.
	slices.Sort(errs)
	return sortedQuantile(errs, 0.5), sortedQuantile(errs, 0.9)
}

// LiveError is the median and 90th-percentile relative error of a set of
// coordinates (say, every live peer's Service.Coordinate(), peer i placed on
// row i) against the RTTs m in ms, over all pairs with a known RTT. It is the
// figure Run reports, for swarms of real peers.
func LiveError(coords []vivaldi.Coord, m latency.RTTs) (median, p90 float64) {
	n := min(len(coords), m.Len())
	return score(prefix{m, n}, func(i, j int) float64 { return coords[i].DistanceTo(coords[j]) })
}

// prefix is the first n hosts of an RTTs.
type prefix struct {
	latency.RTTs
	n int
}

func (p prefix) Len() int { return p.n }

// Quantile is the q-quantile of xs (nearest rank, on a sorted copy); NaN for
// none.
func Quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedQuantile(s, q)
}

// sortedQuantile is Quantile of xs sorted already.
func sortedQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return xs[max(0, int(math.Ceil(q*float64(len(xs))))-1)]
}

// setSerfRand gives serf's Config its own seeded source. serf keeps the
// source in an unexported field (its own tests set it) and otherwise uses
// the global math/rand, which Go seeds randomly: the baseline would differ
// from run to run. Reaching the field by reflection keeps serf's code
// untouched; if a serf release renames it, runs are merely not repeatable,
// which the determinism test catches.
func setSerfRand(cfg *coordinate.Config, rng *rand.Rand) {
	f := reflect.ValueOf(cfg).Elem().FieldByName("rand")
	if !f.IsValid() || f.Type() != reflect.TypeOf(rng) {
		return
	}
	reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(rng))
}
