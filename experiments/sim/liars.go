package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// LiarKind is how a coordinate liar answers Vivaldi exchanges (Kaafar et
// al. 2007; Zage and Nita-Rotaru 2007; Chan-Tin et al. on frog-boiling).
// Every liar claims a small error so that its answers weigh heavily.
type LiarKind uint8

const (
	// Inflation claims a point far from its own: its true coordinate moved
	// LieFar along a direction of its own, with LieHeight more height.
	Inflation LiarKind = iota + 1
	// Deflation claims the origin with the least height, to look central
	// to everyone (and attract).
	Deflation
	// Oscillation claims a fresh random point with each answer, every
	// component uniform in ±LieFar/√dims and a height up to LieHeight.
	Oscillation
	// FrogBoiling claims its true coordinate plus an offset that every
	// liar grows in one common direction at FrogRate from FrogStart on:
	// a step between two answers stays within a plausible error.
	FrogBoiling
)

// LiarKinds are the kinds, in the order experiments list them.
var LiarKinds = []LiarKind{Inflation, Deflation, Oscillation, FrogBoiling}

func (k LiarKind) String() string {
	switch k {
	case Inflation:
		return "inflation"
	case Deflation:
		return "deflation"
	case Oscillation:
		return "oscillation"
	case FrogBoiling:
		return "frog-boiling"
	}
	return fmt.Sprintf("LiarKind(%d)", uint8(k))
}

// The liars' parameters (seconds; the claimed errors are dimensionless).
const (
	LieFar     = 0.5  // inflation's offset, oscillation's spread
	LieHeight  = 0.2  // inflation's extra height, oscillation's most
	LieError   = 0.01 // the error inflation, deflation and oscillation claim
	FrogError  = 0.05 // the error a frog-boiling liar claims
	FrogRate   = 5e-4 // frog-boiling drift, seconds of offset per second
	FrogOfRuns = 4    // the drift starts after 1/FrogOfRuns of the run
)

// PickLiars marks round(fraction·n) of n peers as liars, a seeded choice in
// which a smaller fraction's liars are among a larger one's.
func PickLiars(n int, fraction float64, seed int64) []bool {
	out := make([]bool, n)
	perm := rand.New(rand.NewSource(seed*31 + 0x11a5)).Perm(n)
	for _, i := range perm[:int(math.Round(fraction*float64(n)))] {
		out[i] = true
	}
	return out
}

// Liar is the liars' side of a Vivaldi simulation: who lies and what each
// answers.
type Liar struct {
	Kind  LiarKind
	Liars []bool
	// Delay makes a liar hold its answer back until the RTT fits the
	// distance from the caller's coordinate to its claim, where that is
	// longer than the true RTT (by at most a second): a liar can add delay
	// but not remove it.
	Delay bool
	// FrogStart is when frog-boiling starts to drift (virtual time).
	FrogStart time.Duration

	dirs [][]float64 // each liar's direction (inflation); dirs[0] frog-boiling's common one
	rng  *rand.Rand  // oscillation's draws
}

// NewLiar prepares the liars of kind over dims-dimensional coordinates.
func NewLiar(kind LiarKind, liars []bool, dims int, seed int64) *Liar {
	rng := rand.New(rand.NewSource(seed*7 + int64(kind)))
	l := &Liar{Kind: kind, Liars: liars, dirs: make([][]float64, len(liars)), rng: rng}
	unit := func() []float64 {
		v := make([]float64, dims)
		var m float64
		for i := range v {
			v[i] = rng.NormFloat64()
			m += v[i] * v[i]
		}
		m = math.Sqrt(m)
		for i := range v {
			v[i] /= m
		}
		return v
	}
	common := unit()
	for i, lies := range liars {
		switch {
		case !lies:
		case kind == FrogBoiling:
			l.dirs[i] = common
		default:
			l.dirs[i] = unit()
		}
	}
	return l
}

// Claim is the coordinate liar j claims at virtual time now, honest being
// its own; an honest peer's is honest.
func (l *Liar) Claim(now time.Duration, j int, honest vivaldi.Coord) vivaldi.Coord {
	if !l.Liars[j] {
		return honest
	}
	c := honest.Clone()
	switch l.Kind {
	case Inflation:
		for k := range c.Vec {
			c.Vec[k] += LieFar * l.dirs[j][k]
		}
		c.Height += LieHeight
		c.Error = LieError
	case Deflation:
		for k := range c.Vec {
			c.Vec[k] = 0
		}
		c.Height, c.Error = 10e-6, LieError
	case Oscillation:
		w := LieFar / math.Sqrt(float64(len(c.Vec)))
		for k := range c.Vec {
			c.Vec[k] = w * (2*l.rng.Float64() - 1)
		}
		c.Height, c.Error = LieHeight*l.rng.Float64(), LieError
	case FrogBoiling:
		off := FrogRate * max(0, (now-l.FrogStart).Seconds())
		for k := range c.Vec {
			c.Vec[k] += off * l.dirs[j][k]
		}
		c.Error = FrogError
	}
	return c
}

// Answer is a VivaldiOptions.Answer: a liar's claim, and with Delay the
// delay that makes the RTT fit it.
func (l *Liar) Answer(now time.Duration, i, j int, honest, caller vivaldi.Coord, rtt time.Duration) (vivaldi.Coord, time.Duration) {
	c := l.Claim(now, j, honest)
	if !l.Liars[j] || !l.Delay {
		return c, 0
	}
	want := time.Duration(caller.DistanceTo(c) * float64(time.Second))
	return c, min(max(want-rtt, 0), time.Second)
}

// LiarOptions describe a run of Vivaldi and then the token method with
// coordinate liars among the peers.
type LiarOptions struct {
	RTT  latency.RTTs
	IDs  []string
	Seed int64
	// Kind and Liars: who lies and how (Liars nil or all false: the clean
	// run). Delay as Liar.Delay.
	Kind  LiarKind
	Liars []bool
	Delay bool
	// Vivaldi is every peer's model configuration (nil: DefaultConfig);
	// Rounds of SimulateVivaldi.
	Vivaldi *vivaldi.Config
	Rounds  int
	// Repel is the token method's configuration (Tokens set), run over the
	// coordinates at the end (a liar's claim then) as SimulateRepel does,
	// clients attaching as the live selector (capacity Capacity, displace
	// superpeer.DefaultDisplace). Tokens 0: no token run.
	Repel    repel.Config
	Capacity int
	// Watch, if set, sees every event of the token run (peer index, event).
	Watch func(i int, e repel.Event)
}

// LiarResult is the outcome of SimulateLiars.
type LiarResult struct {
	Liars int `json:"liars"`
	// HonestMedian and HonestP90 are the relative embedding errors over
	// the pairs of honest peers (their own coordinates against the matrix).
	HonestMedian float64 `json:"honest_median_error"`
	HonestP90    float64 `json:"honest_p90_error"`
	// Samples the honest peers took from liars and from honest peers, and
	// how many of each their model refused.
	LiarSamples    uint64            `json:"liar_samples"`
	LiarRefused    uint64            `json:"liar_samples_refused"`
	HonestSamples  uint64            `json:"honest_samples"`
	HonestRefused  uint64            `json:"honest_samples_refused"`
	RefusedReasons map[string]uint64 `json:"refused_reasons"`
	// ClientRTT is the mean true RTT (ms) of honest clients (neither liars
	// nor holders) to the holder they are attached to; Unattached honest
	// clients are left out of it.
	ClientRTT  float64 `json:"client_rtt_ms"`
	Clients    int     `json:"honest_clients"`
	Unattached int     `json:"honest_unattached"`
	// Holders at the end and how many of them are liars; HolderPeers
	// are they (peer indices, ascending).
	Holders      int   `json:"holders"`
	LiarHolders  int   `json:"liar_holders"`
	HolderPeers  []int `json:"holder_peers"`
	RepelSettled bool  `json:"repel_settled"`
	// CoordMisfits counts the clients honest holders left out of their
	// token's placement, their coordinates against the holder's own RTT
	// to them (repel.EventCoordMisfit): liars' and honest peers'.
	CoordMisfitLiars  int `json:"coord_misfits_liars"`
	CoordMisfitHonest int `json:"coord_misfits_honest"`
	// PerClient is each peer's true RTT (ms) to its holder, -1 for a
	// holder, a liar or an unattached peer: the clean run's, to compare
	// the same clients.
	PerClient []float64 `json:"-"`
}

// liarFlags checks a liar run's RTT space (at least two peers, n covered)
// and its flags (one a peer; none: nobody lies).
func liarFlags(what string, rtt latency.RTTs, n int, liars []bool) ([]bool, error) {
	if rtt == nil || rtt.Len() < n || n < 2 {
		return nil, fmt.Errorf("sim: %s need an RTT space covering at least 2 peers", what)
	}
	if liars == nil {
		return make([]bool, n), nil
	}
	if len(liars) != n {
		return nil, fmt.Errorf("sim: %s: %d flags for %d peers", what, len(liars), n)
	}
	return liars, nil
}

// SimulateLiars runs SimulateVivaldi with liars answering as o.Kind, scores
// the honest peers' coordinates, then runs SimulateRepel over the
// coordinates (the liars' claims) and scores the honest clients.
func SimulateLiars(o LiarOptions) (*LiarResult, error) {
	n := len(o.IDs)
	var err error
	if o.Liars, err = liarFlags("liars", o.RTT, n, o.Liars); err != nil {
		return nil, err
	}
	cfg := vivaldi.DefaultConfig()
	if o.Vivaldi != nil {
		cfg = *o.Vivaldi
	}
	res := &LiarResult{RefusedReasons: map[string]uint64{}}
	// refused holds the pairs (i·n + j) whose last sample i refused as
	// implausible: the live service forgets j's coordinate then.
	refused := map[int]bool{}
	for _, l := range o.Liars {
		if l {
			res.Liars++
		}
	}
	liar := NewLiar(o.Kind, o.Liars, cfg.Dimensions, o.Seed)
	liar.Delay = o.Delay
	liar.FrogStart = time.Duration(o.Rounds/FrogOfRuns) * time.Second
	vo := VivaldiOptions{RTT: o.RTT, Seed: o.Seed, Rounds: o.Rounds, Config: &cfg,
		Updated: func(i, j int, err error) {
			if errors.Is(err, vivaldi.ErrImplausible) {
				refused[i*n+j] = true
			} else if err == nil {
				delete(refused, i*n+j)
			}
			if o.Liars[i] {
				return
			}
			if o.Liars[j] {
				res.LiarSamples++
			} else {
				res.HonestSamples++
			}
			if err == nil {
				return
			}
			if o.Liars[j] {
				res.LiarRefused++
			} else {
				res.HonestRefused++
			}
			res.RefusedReasons[refusal(err)]++
		}}
	if res.Liars > 0 {
		vo.Answer = liar.Answer
	}
	vr, err := SimulateVivaldi(vo)
	if err != nil {
		return nil, err
	}
	var pairs [][2]int32
	for i := 0; i < n; i++ {
		for j := i + 1; j < n && !o.Liars[i]; j++ {
			if !o.Liars[j] {
				pairs = append(pairs, [2]int32{int32(i), int32(j)})
			}
		}
	}
	res.HonestMedian, res.HonestP90 = CoordErrors(o.RTT, vr.Coords, pairs)
	if o.Repel.Tokens == 0 {
		return res, nil
	}
	end := time.Duration(o.Rounds) * time.Second
	coords := make([]vivaldi.Coord, n)
	for j, c := range vr.Coords {
		coords[j] = liar.Claim(end, j, c)
	}
	index := make(map[string]int, n)
	for j, id := range o.IDs {
		index[id] = j
	}
	rr, err := SimulateRepel(RepelOptions{RTT: o.RTT, Coords: coords, Neighbors: vr.Neighbors, IDs: o.IDs,
		Config: o.Repel, Seed: o.Seed, Attach: AttachSelector, Capacity: o.Capacity,
		Choose: repel.DefaultAttachConfig(), Displace: superpeer.DefaultDisplace,
		Hidden: func(i, j int) bool { return refused[i*n+j] },
		Watch: func(i int, e repel.Event) {
			if o.Watch != nil {
				o.Watch(i, e)
			}
			j, ok := index[e.Token.Holder]
			switch {
			case e.Kind != repel.EventCoordMisfit || o.Liars[i] || !ok:
			case o.Liars[j]:
				res.CoordMisfitLiars++
			default:
				res.CoordMisfitHonest++
			}
		}})
	if err != nil {
		return nil, err
	}
	res.RepelSettled = rr.Settled
	res.Holders, res.HolderPeers = len(rr.Superpeers), rr.Superpeers
	res.LiarHolders = res.HeldBy(o.Liars)
	holder := make([]bool, n)
	for _, h := range rr.Superpeers {
		holder[h] = true
	}
	res.PerClient = make([]float64, n)
	var sum float64
	for c, h := range rr.Assignment {
		res.PerClient[c] = -1
		if o.Liars[c] || holder[c] {
			continue
		}
		if h == metrics.Unassigned || h < 0 {
			res.Unattached++
			continue
		}
		d := o.RTT.RTT(c, h)
		res.PerClient[c] = d
		sum += d
		res.Clients++
	}
	if res.Clients > 0 {
		res.ClientRTT = sum / float64(res.Clients)
	}
	return res, nil
}

// HeldBy is how many of the holders at the end are among the marked
// peers: the liars of this run, or of another run over the same peers.
func (r *LiarResult) HeldBy(marked []bool) int {
	k := 0
	for _, h := range r.HolderPeers {
		if marked[h] {
			k++
		}
	}
	return k
}

// ClientRTTOver is the mean of per over the clients that have an RTT in
// both per and other (-1 marks none): a run's client RTT over the same
// clients as another's.
func ClientRTTOver(per, other []float64) float64 {
	var sum float64
	k := 0
	for c, d := range per {
		if d >= 0 && c < len(other) && other[c] >= 0 {
			sum += d
			k++
		}
	}
	if k == 0 {
		return 0
	}
	return sum / float64(k)
}

// refusal names the reason vivaldi.Client.Update refused a sample for.
func refusal(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{
		{vivaldi.ErrNonFinite, "non_finite"}, {vivaldi.ErrOutOfRange, "out_of_range"},
		{vivaldi.ErrDimensions, "dimensions"}, {vivaldi.ErrRTTRange, "rtt"}, {vivaldi.ErrImplausible, "implausible"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "other"
}
