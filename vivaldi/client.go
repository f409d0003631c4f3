package vivaldi

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"time"
)

// Errors Update refuses a sample with. Each is counted in Stats.
var (
	ErrNonFinite  = errors.New("vivaldi: coordinate has a NaN or infinite component")
	ErrOutOfRange = errors.New("vivaldi: coordinate component out of range")
	ErrDimensions = errors.New("vivaldi: coordinate dimensions do not match")
	ErrRTTRange   = errors.New("vivaldi: RTT not in (0, 10s]")
	// ErrImplausible refuses a sample whose claimed coordinate the recent
	// peers' rule out (Config.TriangleMargin) or, with the outlier test on,
	// the node's recent samples call a lie (Config.OutlierFactor).
	ErrImplausible = errors.New("vivaldi: sample implausible against recent ones")
	// ErrStalled is a sample Service.Sample discarded because this
	// process stalled while timing it (WithStallCheck): the RTT measured
	// the machine, not the link. Nothing is wrong with the peer.
	ErrStalled = errors.New("vivaldi: sample timed across a stall of this process")
)

// MaxRTT is the longest RTT a sample may have: nothing on Earth is further,
// and a longer one is a stalled stream, not a distance.
const MaxRTT = 10 * time.Second

// zero is where a distance is treated as none: two coordinates closer than a
// microsecond have no usable direction between them.
const zero = 1e-6

// Stats counts what Update has done (ServiceStats.Model); a caller of
// Update alone has each refusal as its error. Refused samples leave the
// state alone.
type Stats struct {
	Updates          uint64 // samples applied
	RefusedNonFinite uint64 // remote coordinate had NaN/Inf
	RefusedRange     uint64 // remote coordinate out of range
	RefusedDims      uint64 // remote coordinate of other dimensions
	RefusedRTT       uint64 // RTT ≤ 0 or > MaxRTT
	RefusedOutlier   uint64 // implausible against recent samples (Config.OutlierFactor)
	RefusedTriangle  uint64 // implausible against recent peers (Config.TriangleMargin)
	ErrorFloored     uint64 // remote error raised to Config.RemoteErrorMin
	Resets           uint64 // own state went invalid and was reset
}

// Client is one node's Vivaldi state. It is safe for concurrent use: one
// mutex guards everything and getters return copies.
type Client struct {
	mu     sync.Mutex
	cfg    Config
	rng    *rand.Rand
	coord  Coord
	filter map[string]*filterState
	tick   uint64    // update counter, orders filter entries by recency
	refs   []float64 // recent filtered RTTs, for the RelativeForce reference
	refIdx int
	window []slot // ring of the last NeighborWindow updates, in order
	winIdx int
	minRTT float64   // least RTT of the first StartHeightSamples samples, seconds
	resid  []float64 // recent relative residuals, for Config.OutlierFactor
	resIdx int
	stats  Stats
}

type filterState struct {
	samples []float64 // ring of the last LatencyFilterSize RTTs, seconds
	next    int
	last    uint64  // tick of the last update, for eviction and decay
	coord   Coord   // the peer's coordinate at its last sample
	rtt     float64 // its filtered RTT then, seconds
	gone    bool    // forgotten or evicted: out of the neighbour window too
}

// slot is one of the last NeighborWindow updates: which peer, and when.
type slot struct {
	f    *filterState
	tick uint64
}

// refWindow is how many recent RTTs the RelativeForce reference is the
// median of.
const refWindow = 32

// residWindow is how many recent relative residuals the outlier test
// (Config.OutlierFactor) takes the median of, and residMin how many it needs
// before it refuses anything.
const (
	residWindow = 32
	residMin    = 16
)

// NewClient starts a node at the origin with maximal error. rng breaks ties
// when two coordinates coincide (it is used by no one else, so the same seed
// and the same samples give the same coordinates); nil seeds one from 1.
func NewClient(cfg Config, rng *rand.Rand) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if rng == nil {
		rng = rand.New(rand.NewSource(1))
	}
	return &Client{
		cfg:    cfg,
		rng:    rng,
		coord:  newCoord(cfg.Dimensions, cfg.HeightMin, cfg.ErrorMax),
		filter: make(map[string]*filterState),
	}, nil
}

// GetCoordinate returns a copy of the node's coordinate.
func (c *Client) GetCoordinate() Coord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coord.Clone()
}

// SetCoordinate replaces the node's coordinate, e.g. with one persisted
// across a restart. It is checked like a remote one.
func (c *Client) SetCoordinate(co Coord) error {
	if err := co.Check(); err != nil {
		return err
	}
	if len(co.Vec) != c.cfg.Dimensions {
		return ErrDimensions
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.coord = co.Clone()
	return nil
}

// DistanceTo is the predicted RTT to a node at o.
func (c *Client) DistanceTo(o Coord) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.coord.DistanceTo(o)
	if math.IsNaN(d) || d < 0 {
		return 0
	}
	return time.Duration(d * float64(time.Second))
}

// forgetNode drops the latency filter of a peer that has gone.
func (c *Client) forgetNode(peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.filter[peer]; ok {
		f.gone = true
		delete(c.filter, peer)
	}
}

// counters returns the counters (the service's Stats().Model).
func (c *Client) counters() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Update feeds one RTT sample to peer, whose coordinate is remote, and moves
// this node's coordinate. A sample with an invalid coordinate or RTT is
// refused with ErrNonFinite, ErrOutOfRange, ErrDimensions or ErrRTTRange
// (wrapped), counted, and changes nothing.
func (c *Client) Update(peer string, remote Coord, rtt time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := remote.Check(); err != nil {
		switch err {
		case ErrNonFinite:
			c.stats.RefusedNonFinite++
		case ErrDimensions:
			c.stats.RefusedDims++
		default:
			c.stats.RefusedRange++
		}
		return fmt.Errorf("update from %q: %w", peer, err)
	}
	if len(remote.Vec) != len(c.coord.Vec) {
		c.stats.RefusedDims++
		return fmt.Errorf("update from %q: %w: %d, want %d", peer, ErrDimensions, len(remote.Vec), len(c.coord.Vec))
	}
	if rtt <= 0 || rtt > MaxRTT {
		c.stats.RefusedRTT++
		return fmt.Errorf("update from %q: %w: %v", peer, ErrRTTRange, rtt)
	}
	c.tick++
	r, f := c.latencyFilter(peer, rtt.Seconds())
	tri := c.violates(remote, r, f)
	if odd := c.implausible(remote, r); tri || odd {
		if tri {
			c.stats.RefusedTriangle++
		} else {
			c.stats.RefusedOutlier++
		}
		// Nor does its earlier coordinate count in the neighbour mean.
		f.coord = Coord{}
		return fmt.Errorf("update from %q: %w", peer, ErrImplausible)
	}
	if m := math.Min(c.cfg.RemoteErrorMin, c.coord.Error); remote.Error < m {
		remote = remote.Clone()
		remote.Error = m
		c.stats.ErrorFloored++
	}
	f.coord, f.rtt = remote.Clone(), r
	if w := c.cfg.NeighborWindow; w > 0 {
		if len(c.window) < w {
			c.window = append(c.window, slot{f, c.tick})
		} else {
			c.window[c.winIdx] = slot{f, c.tick}
			c.winIdx = (c.winIdx + 1) % w
		}
	}
	c.updateVivaldi(remote, r)
	c.updateGravity()
	if c.coord.Check() != nil {
		// Cannot happen with finite, bounded inputs short of a bug, but a
		// NaN stored here would spread to every peer that samples us.
		c.stats.Resets++
		c.coord = newCoord(c.cfg.Dimensions, c.cfg.HeightMin, c.cfg.ErrorMax)
		return nil
	}
	c.stats.Updates++
	return nil
}

// latencyFilter records s for peer and returns the median of its recent
// samples. Lock held.
func (c *Client) latencyFilter(peer string, s float64) (float64, *filterState) {
	n := c.cfg.LatencyFilterSize
	f, ok := c.filter[peer]
	if !ok {
		if len(c.filter) >= c.cfg.MaxFilterPeers {
			c.evictOldestLocked()
		}
		f = &filterState{samples: make([]float64, 0, n)}
		c.filter[peer] = f
	}
	f.last = c.tick
	if n <= 1 {
		return s, f
	}
	if len(f.samples) < n {
		f.samples = append(f.samples, s)
	} else {
		f.samples[f.next] = s
		f.next = (f.next + 1) % n
	}
	var buf [64]float64
	return upperMedian(append(buf[:0], f.samples...)), f
}

func (c *Client) evictOldestLocked() {
	var oldest string
	var at uint64 = math.MaxUint64
	for p, f := range c.filter {
		if f.last < at {
			oldest, at = p, f.last
		}
	}
	if f, ok := c.filter[oldest]; ok {
		f.gone = true
		delete(c.filter, oldest)
	}
}

// triMin is how many recent peers the triangle test (Config.TriangleMargin)
// needs before it refuses anything.
const triMin = 8

// violates is the triangle test of Config.TriangleMargin: whether the
// median over the peers of the neighbour window (f, the sampled peer's own
// entry, left out) of d(remote, k)/(r + rtt_k) exceeds TriangleMargin.
// Lock held.
func (c *Client) violates(remote Coord, r float64, self *filterState) bool {
	m := c.cfg.TriangleMargin
	if m <= 0 {
		return false
	}
	var buf [64]float64
	qs := buf[:0]
	for _, sl := range c.window {
		f := sl.f
		if f == self || f.gone || f.last != sl.tick || f.coord.Vec == nil || len(f.coord.Vec) != len(remote.Vec) {
			continue
		}
		qs = append(qs, remote.DistanceTo(f.coord)/math.Max(r+f.rtt, zero))
	}
	if len(qs) < triMin {
		return false
	}
	return upperMedian(qs) > m
}

// implausible is the outlier test of Config.OutlierFactor: whether the
// relative residual of a sample of remote at the filtered RTT r exceeds
// OutlierFactor times the median of the node's recent ones (and
// OutlierMin). A node refuses only once it has settled or taken more than
// OutlierAfter samples: before, its own coordinate is too far off for its
// residuals to tell a liar from its own error. Every sample's residual
// joins the recent ones, refused or not, so that a change most peers agree
// on (the node moved, a route changed) raises the median and gets
// through. Lock held.
func (c *Client) implausible(remote Coord, r float64) bool {
	k := c.cfg.OutlierFactor
	if k <= 0 {
		return false
	}
	rel := math.Abs(r-c.coord.DistanceTo(remote)) / math.Max(r, zero)
	var buf [residWindow]float64
	recent := append(buf[:0], c.resid...) // upperMedian reorders its argument
	if len(c.resid) < residWindow {
		c.resid = append(c.resid, rel)
	} else {
		c.resid[c.resIdx] = rel
		c.resIdx = (c.resIdx + 1) % residWindow
	}
	active := c.coord.Error < c.cfg.SettledError || c.tick > uint64(c.cfg.OutlierAfter)
	if len(recent) < residMin || !active {
		return false
	}
	return rel > math.Max(k*upperMedian(recent), c.cfg.OutlierMin)
}

// upperMedian is the element of rank len(xs)/2 of xs (the median, the
// upper one of an even count), which it reorders: a selection, O(n).
func upperMedian(xs []float64) float64 {
	k := len(xs) / 2
	lo, hi := 0, len(xs)-1
	for lo < hi {
		// Hoare partition around the middle element's value.
		p := xs[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for xs[i] < p {
				i++
			}
			for xs[j] > p {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return xs[k]
		}
	}
	return xs[k]
}

// reference is the median of the node's recent RTTs: the scale against
// which RelativeForce calls a link short or long. Lock held.
func (c *Client) reference(r float64) float64 {
	if len(c.refs) < refWindow {
		c.refs = append(c.refs, r)
	} else {
		c.refs[c.refIdx] = r
		c.refIdx = (c.refIdx + 1) % refWindow
	}
	var buf [refWindow]float64
	return upperMedian(append(buf[:0], c.refs...))
}

// updateVivaldi is the update of [1] (adaptive timestep weighted by both
// error estimates, height vectors), with our early phase (bigger timestep,
// damped confidence weight, height from the least RTT) and, once the node
// has settled, the neighbour mean, relative force and residual clip.
// Lock held.
func (c *Client) updateVivaldi(o Coord, rtt float64) {
	cfg := &c.cfg
	if rtt < zero {
		rtt = zero
	}
	dist := c.coord.DistanceTo(o)
	wrong := math.Abs(dist-rtt) / rtt

	// Weight by confidence: a node sure of itself moves little, one that
	// hears from a sure peer moves much.
	total := c.coord.Error + o.Error
	if total < zero {
		total = zero
	}
	w := c.coord.Error / total
	if p := cfg.EarlyConfidence; p != 1 && c.coord.Error >= cfg.SettledError {
		// Unsettled: both estimates are still mostly the prior, so their
		// differences count for less (see Config.EarlyConfidence).
		a, b := math.Pow(c.coord.Error, p), math.Pow(math.Max(o.Error, zero), p)
		w = a / (a + b)
	}

	cc := cfg.CC
	if cfg.CCStart > cfg.CC {
		frac := math.Min(1, c.coord.Error/cfg.ErrorMax)
		if k := cfg.CCStartSamples; k > 0 { // and fades with the sample count
			frac *= math.Max(0, 1-float64(c.tick-1)/float64(k))
		}
		cc = cfg.CC + (cfg.CCStart-cfg.CC)*frac
	}

	c.coord.Error = cfg.CE*w*wrong + c.coord.Error*(1-cfg.CE*w)
	if c.coord.Error > cfg.ErrorMax {
		c.coord.Error = cfg.ErrorMax
	}

	var ref float64
	if cfg.RelativeForce > 0 {
		ref = c.reference(rtt)
	}
	settled := c.coord.Error < cfg.SettledError
	if settled && cfg.NeighborWindow > 0 && c.coord.vecDistance(o) > zero {
		c.applyNeighborForce(cc, ref)
	} else {
		res := rtt - dist
		if settled {
			res = c.clip(res, rtt)
		}
		force := cc * w * res
		if settled && cfg.RelativeForce > 0 {
			force *= c.relScale(ref, rtt)
		}
		c.applyForce(force, o)
	}
	c.startHeight(rtt)
}

// startHeight sets the height of an unsettled node in its first
// StartHeightSamples samples to StartHeight times the least RTT it has seen
// (see Config.StartHeight). Lock held.
func (c *Client) startHeight(rtt float64) {
	cfg := &c.cfg
	if cfg.StartHeight <= 0 || c.tick > uint64(cfg.StartHeightSamples) {
		return
	}
	if c.tick == 1 || rtt < c.minRTT {
		c.minRTT = rtt
	}
	if c.coord.Error < cfg.SettledError {
		return // settled: a coordinate restored by SetCoordinate keeps its height
	}
	c.coord.Height = math.Max(cfg.HeightMin, cfg.StartHeight*c.minRTT)
}

// clip bounds a residual of a link of rtt seconds to ±ResidualClip·rtt.
func (c *Client) clip(res, rtt float64) float64 {
	if c.cfg.ResidualClip <= 0 {
		return res
	}
	lim := c.cfg.ResidualClip * rtt
	return math.Max(-lim, math.Min(lim, res))
}

// relScale is the RelativeForce factor for a link of rtt seconds.
func (c *Client) relScale(ref, rtt float64) float64 {
	s := math.Pow(ref/rtt, c.cfg.RelativeForce)
	return math.Max(0.25, math.Min(4, s))
}

// applyNeighborForce moves the node by the decay-weighted mean of the forces
// from every peer sampled in the last NeighborWindow updates, each at its
// last coordinate and filtered RTT ([2]'s neighbour decay). One
// sample is a noisy estimate of where the node should be; the mean over its
// recent neighbours is a far steadier one, so the node stops jittering
// around its best position. Lock held.
func (c *Client) applyNeighborForce(cc, ref float64) {
	win := float64(c.cfg.NeighborWindow)
	dims := len(c.coord.Vec)
	move := make([]float64, dims)
	var moveH, wsum float64
	// The ring, not the map: the sum must run in the same order every time
	// or the same samples give different coordinates.
	for _, sl := range c.window {
		f := sl.f
		if f.gone || f.last != sl.tick || f.coord.Vec == nil {
			continue // forgotten, or counted at its newer slot
		}
		age := float64(c.tick - sl.tick)
		if age >= win {
			continue
		}
		decay := (win - age) / win
		o := f.coord
		var mag float64
		for i := range o.Vec {
			d := c.coord.Vec[i] - o.Vec[i]
			mag += d * d
		}
		mag = math.Sqrt(mag)
		h := c.coord.Height + o.Height
		dist := mag + h
		if dist < zero || mag < zero {
			continue
		}
		total := c.coord.Error + o.Error
		if total < zero {
			total = zero
		}
		w := c.coord.Error / total
		force := w * c.clip(f.rtt-dist, f.rtt)
		if ref > 0 {
			force *= c.relScale(ref, f.rtt)
		}
		if hs := c.cfg.HeightShare; hs > 0 {
			for i := range o.Vec {
				move[i] += decay * (1 - hs) * force * (c.coord.Vec[i] - o.Vec[i]) / mag
			}
			moveH += decay * hs * force
		} else {
			for i := range o.Vec {
				move[i] += decay * force * (c.coord.Vec[i] - o.Vec[i]) / dist
			}
			moveH += decay * force * h / dist
		}
		wsum += decay
	}
	if wsum == 0 {
		return
	}
	for i := range move {
		c.coord.Vec[i] += cc * move[i] / wsum
	}
	c.coord.Height += cc * moveH / wsum
	if c.coord.Height < c.cfg.HeightMin {
		c.coord.Height = c.cfg.HeightMin
	}
}

// applyForce moves the node by force seconds along the height vector from o
// to it: the Euclidean part takes the share |x_i − x_j|/dist, the height the
// share (h_i + h_j)/dist, so the predicted distance changes by exactly force.
// Lock held.
func (c *Client) applyForce(force float64, o Coord) {
	diff := make([]float64, len(c.coord.Vec))
	var mag float64
	for i := range diff {
		diff[i] = c.coord.Vec[i] - o.Vec[i]
		mag += diff[i] * diff[i]
	}
	mag = math.Sqrt(mag)
	if mag < zero {
		// Coincident: pick a random direction, or nobody ever leaves the
		// origin where everyone starts.
		mag = 0
		for i := range diff {
			diff[i] = c.rng.Float64() - 0.5
			mag += diff[i] * diff[i]
		}
		mag = math.Sqrt(mag)
		if mag < zero {
			diff[0], mag = 1, 1
		}
		for i := range diff {
			diff[i] /= mag
		}
		for i := range c.coord.Vec {
			c.coord.Vec[i] += force * diff[i]
		}
		return
	}
	h := c.coord.Height + o.Height
	norm := mag + h
	if hs := c.cfg.HeightShare; hs > 0 && c.coord.Error < c.cfg.SettledError {
		for i := range c.coord.Vec {
			c.coord.Vec[i] += (1 - hs) * force * diff[i] / mag
		}
		c.coord.Height += hs * force
	} else {
		for i := range c.coord.Vec {
			c.coord.Vec[i] += force * diff[i] / norm
		}
		c.coord.Height += force * h / norm
	}
	if c.coord.Height < c.cfg.HeightMin {
		c.coord.Height = c.cfg.HeightMin
	}
}

// updateGravity pulls the node towards the origin ([2]'s gravity).
// Lock held.
func (c *Client) updateGravity() {
	if c.cfg.GravityRho <= 0 {
		return
	}
	var mag float64
	for _, v := range c.coord.Vec {
		mag += v * v
	}
	mag = math.Sqrt(mag)
	if mag < zero {
		return
	}
	pull := (mag / c.cfg.GravityRho) * (mag / c.cfg.GravityRho)
	for i := range c.coord.Vec {
		c.coord.Vec[i] -= pull * c.coord.Vec[i] / mag
	}
}

// vecDistance is the Euclidean distance of the vectors, without heights.
func (c Coord) vecDistance(o Coord) float64 {
	var sum float64
	for i := range c.Vec {
		d := c.Vec[i] - o.Vec[i]
		sum += d * d
	}
	return math.Sqrt(sum)
}
