package vivaldi

import (
	"errors"
	"fmt"
	"math"
)

// Config tunes the Vivaldi model. Every distance is in seconds of RTT, as in
// Coord. The references are:
//
//	[1] Dabek, Cox, Kaashoek, Morris. "Vivaldi: A Decentralized Network
//	    Coordinate System." SIGCOMM 2004.
//	[2] Ledlie, Gardner, Seltzer. "Network Coordinates in the Wild." NSDI 2007.
//	[3] hashicorp/serf, package coordinate (our yardstick), whose defaults are
//	    8 dimensions, ce = cc = 0.25, filter 3, rho 150.
//
// The defaults are one configuration for every matrix, chosen by
// experiment: tuned on the PlanetLab-490 and Seattle-99 matrices and checked
// on other seeds and on generated matrices (see experiments/vivaldieval and
// `peer eval vivaldi`). Fields marked "our addition" are not in [1] or [2];
// each one lowered the error measurably there. The figures behind each
// default, and the seeds and rounds they were measured on, are in
// experiments/README.md, section "How the defaults were chosen".
type Config struct {
	// Dimensions of the Euclidean part of a coordinate (the height comes on
	// top). 8, as [3]: on PlanetLab 4–6 dimensions reach the same final
	// error, but 8 converge faster in the first rounds.
	Dimensions int

	// ErrorMax is the error estimate of a node that has not measured anything
	// yet, and the cap on it (dimensionless, a relative error). [1], [3]: 1.5.
	ErrorMax float64

	// CE bounds how far one sample moves the error estimate (dimensionless;
	// [1] and [3]: 0.25, ours 0.1). A smaller value averages the error
	// over more samples: the weights below are steadier and a node keeps
	// its big early timestep (CCStart) a little longer. 0.1 was chosen by
	// experiment: it embeds PlanetLab better than 0.15 at a small cost on
	// Seattle, and a smaller value cost Seattle more (figures:
	// experiments/README.md, "How the defaults were chosen").
	CE float64

	// CC bounds how far one sample moves the coordinate towards its ideal
	// position once the error is low (dimensionless fraction of the
	// residual; [1] and [3]: 0.25, ours 0.75). With NeighborWindow the force
	// is a mean over dozens of peers, far less noisy than one sample, so a
	// bigger step converges faster without jitter.
	CC float64

	// CCStart is the timestep used while the node's own error is at ErrorMax;
	// it falls towards CC as the error falls (linearly in error/ErrorMax).
	// Everybody starts at the origin, where small steps waste the first rounds
	// inching outwards. Dimensionless, in [0, 2] (with both errors at the
	// maximum the weight is 1/2, so 2 is a full correction); a value below CC
	// means CC throughout. Our addition; 1.5, chosen by experiment together
	// with CCStartSamples: without it 1.5 overshoots on Seattle's
	// non-Euclidean links, and 2 does worse in the first rounds there even
	// with it (experiments/README.md, "How the defaults were chosen").
	CCStart float64

	// CCStartSamples ends the big early timestep by the count of the node's
	// own samples as well as by its error: the extra CCStart − CC fades
	// linearly to nothing over the first CCStartSamples samples (samples;
	// 0 lets the error alone anneal it). On a matrix that does not embed
	// well (Seattle) the error estimate stays high for long, and a timestep
	// annealed by it alone keeps overshooting; the count bounds that, which
	// in turn lets the first samples take a bigger step. Our addition; 24,
	// chosen by experiment (16–32 do alike): against annealing by the error
	// alone it lowers the error on PlanetLab and on Seattle (figures:
	// experiments/README.md, "How the defaults were chosen").
	CCStartSamples int

	// HeightMin is the least height (seconds). Heights model access links and
	// are never negative; a small floor keeps a node from sitting on the
	// Euclidean plane where the height gradient vanishes. [3]: 10 µs.
	HeightMin float64

	// LatencyFilterSize is the number of recent RTT samples per peer whose
	// median is used as the RTT ([2]'s latency filter; [3]: 3). It rejects
	// the rare huge sample (a queue, a GC pause) that otherwise throws a
	// coordinate across the space. It only acts on peers sampled again and
	// again, so it does nothing on the random schedule of the evaluation and
	// matters on the neighbour sets of a live swarm. 1 disables the filter.
	LatencyFilterSize int

	// MaxFilterPeers bounds the peers the latency filter remembers, so a
	// stream of fresh peer IDs cannot grow memory without bound; past it the
	// least recently updated peer is forgotten.
	MaxFilterPeers int

	// GravityRho pulls coordinates towards the origin with a force of
	// (|x|/rho)^2 seconds per update ([2]'s gravity; [3]: 150), which stops
	// the whole system drifting away over months. Seconds; 0 disables it.
	GravityRho float64

	// RelativeForce scales a settled node's pull from a sample by
	// (ref/rtt)^RelativeForce, clamped to [1/4, 4], where ref is the median
	// of the node's last 32 RTTs. Plain Vivaldi minimises squared absolute
	// error, so a long link pulls harder than a short one; we are judged on
	// relative error, where a short link matters as much (and choosing a
	// nearby superpeer is all about short links). Our addition; 1; 0 is
	// plain Vivaldi.
	RelativeForce float64

	// HeightShare, when > 0, splits a settled node's move between its
	// height (this share of the force) and its vector (the rest, along the
	// unit vector), as the gradient of the squared error does: both have
	// gradient norm 1. The height-vector rule of [1] gives the height only
	// its share h/(|x|+h) of the distance, so a small height grows only
	// slowly, and nodes that share an access link (two LANs, say) push
	// apart in the plane instead. Early on we keep [1]'s rule, which
	// settles faster. Dimensionless, in [0, 1).
	HeightShare float64

	// ResidualClip bounds the residual of a settled node's sample to
	// ±ResidualClip·rtt (a Huber loss). A pair that breaks the triangle
	// inequality can never be embedded; unbounded, its residual pulls the
	// node away from where all its other peers put it. Our addition; 0.5;
	// 0 disables it.
	ResidualClip float64

	// NeighborWindow, when > 0, moves a settled node by the mean force of
	// every peer sampled in its last NeighborWindow updates (each at its
	// last coordinate and filtered RTT, weights falling linearly with age)
	// instead of by the newest sample alone: [2]'s neighbour decay. One
	// sample is a noisy guess of where the node belongs; the mean over its
	// recent peers is a steady one. Updates; 64; 0 disables it.
	NeighborWindow int

	// SettledError is the error estimate below which a node counts as
	// settled, and NeighborWindow and RelativeForce apply. Early on every
	// coordinate moves fast, so a remembered one is stale and the newest
	// sample alone is the better guide; and the coarse layout is set by the
	// long links, which RelativeForce would hold back. Dimensionless; 0.7.
	SettledError float64

	// StartHeight sets a new node's height, for its first StartHeightSamples
	// samples, to StartHeight times the least RTT it has measured so far
	// (dimensionless fraction; 0 disables). Everyone starts at HeightMin,
	// and the height-vector rule of [1] gives the height only the share
	// h/(|x|+h) of each move, so from 10 µs it takes hundreds of samples to
	// grow: meanwhile the vectors stretch to stand in for access links. Any
	// RTT is at least the sum of both heights, so with similar heights a
	// node's is at most half its least RTT; a little less leaves room for
	// the peer's. Our addition; 0.4, chosen by experiment (0.3–0.5 do
	// alike): against 0 it lowers the error on Seattle and PlanetLab, most
	// in the first rounds (figures: experiments/README.md, "How the
	// defaults were chosen").
	StartHeight float64

	// StartHeightSamples is how many of a node's first samples StartHeight
	// governs its height for (samples); after that the update rules own it.
	// 32: the least RTT over 32 random peers is close to the node's own
	// access delay plus a near peer's; longer made no difference.
	StartHeightSamples int

	// EarlyConfidence is the exponent p applied to both error estimates in
	// the confidence weight w = e_i^p / (e_i^p + e_j^p) while the node is not
	// settled (dimensionless, in [0, 1]; 1 is [1]'s weight, 0 an even
	// split). In the first rounds every error estimate is still mostly the
	// ErrorMax prior decaying at the same pace, so the differences between
	// them are noise rather than knowledge, and the full weight lets a
	// node lurch towards whichever peer happened to decay a little faster.
	// A root keeps the ordering (a newcomer at ErrorMax still moves more
	// than a settled peer it samples, w ≈ 0.66 instead of 0.94 against
	// error 0.1) but damps it. Settled nodes use [1]'s weight, so a
	// newcomer's guesses never shove them around. Our addition; 0.25,
	// chosen by experiment: against 1 it lowers the median and p90 error a
	// little on PlanetLab and Seattle, a gain that was larger before
	// CCStartSamples (figures: experiments/README.md, "How the defaults
	// were chosen").
	EarlyConfidence float64

	// OutlierFactor, when > 0, refuses a sample whose relative residual
	// |rtt − d|/rtt (d the distance to the coordinate the peer claims, rtt
	// the filtered RTT) exceeds OutlierFactor times the median of the
	// node's last 32 samples' (and OutlierMin), once the node has settled
	// or taken more than OutlierAfter samples, with
	// ErrImplausible, counted in Stats.RefusedOutlier; the peer's earlier
	// coordinate then leaves the neighbour mean too. A coordinate liar
	// (inflation, deflation, oscillation, or a slow drift once it has
	// drifted) claims what the RTT it can be measured at does not bear
	// out, and a median over every recent sample stays the honest
	// peers' while they are most of them (Newton, Seibert et al. 2012,
	// refuse samples that break the physics of the honest ones by an
	// outlier test of this kind). Every residual counts in the median,
	// refused or not, so a change most peers agree on gets through.
	// Dimensionless; 0 disables, the default: the test is opt-in. It is
	// what stops deflation liars (their claims pass the triangle test),
	// and it lowers the median error of an honest embedding, but it
	// refuses the samples of the honest pairs the node fits worst too,
	// which then stay badly fitted: with 5 the p90 error of
	// experiments/vivaldieval (mean of seeds 1–4, 500 rounds, neighbour
	// schedule) rose from 0.273 to 0.356 on PlanetLab and from 0.602 to
	// 0.743 on Seattle (figures: experiments/README.md, "coordinate
	// liars"). 5 is the value measured there.
	OutlierFactor float64

	// OutlierAfter is how many samples a node that has not settled takes
	// before the outlier test applies to it (samples). In the first ones
	// every coordinate moves fast and the node's own error, not a liar,
	// makes most residuals; but liars can keep a node from settling (a
	// liar's samples raise its error estimate), so the count ends the wait
	// as well.
	OutlierAfter int

	// OutlierMin is the least relative residual the outlier test ever
	// refuses (dimensionless): a node whose samples all fit well would
	// otherwise refuse honest ones for residuals that are only noise.
	OutlierMin float64

	// TriangleMargin, when > 0, refuses a sample whose claimed coordinate
	// the triangle inequality rules out: the RTT between the peer and any
	// peer k this node sampled lately is at most the sum of this node's
	// RTTs to both, so an honest claim's distance to k's coordinate is at
	// most about rtt + rtt_k. A sample is refused with ErrImplausible
	// (counted in Stats.RefusedTriangle) when the median over the peers
	// of the neighbour window of d(claim, k)/(rtt + rtt_k) exceeds
	// TriangleMargin. Unlike OutlierFactor it does not rest on this
	// node's own coordinate, so it holds from the first samples, while
	// every coordinate still moves (needs NeighborWindow). Dimensionless;
	// 0 disables.
	TriangleMargin float64

	// RemoteErrorMin raises the error a peer claims to at least this or
	// the node's own error, whichever is less (dimensionless; counted in
	// Stats.ErrorFloored). The confidence weight trusts a peer sure of
	// itself, so a liar claims a tiny error to weigh the most; with the
	// floor a settled node gives no peer more than half the weight of a
	// sample, an unsettled one no more than against an error of
	// RemoteErrorMin. Where every error is tiny (a space that embeds
	// exactly) the floor is too, so the weights still work there. 0
	// disables.
	RemoteErrorMin float64
}

// DefaultConfig is the configuration for a libp2p swarm on the Internet,
// tuned on measured Internet matrices (PlanetLab, Seattle).
func DefaultConfig() Config {
	return Config{
		Dimensions:         8,
		ErrorMax:           1.5,
		CE:                 0.1,
		CC:                 0.75,
		CCStart:            1.5,
		CCStartSamples:     24,
		HeightMin:          10e-6,
		LatencyFilterSize:  3,
		MaxFilterPeers:     1024,
		GravityRho:         150,
		SettledError:       0.7,
		NeighborWindow:     64,
		RelativeForce:      1,
		ResidualClip:       0.5,
		HeightShare:        0.2,
		StartHeight:        0.4,
		StartHeightSamples: 32,
		EarlyConfidence:    0.25,
		OutlierAfter:       48,
		OutlierMin:         0.4,
		TriangleMargin:     2.5,
		RemoteErrorMin:     0.2,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("vivaldi: Config.%s = %v: %s", field, v, want)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case c.Dimensions < 1 || c.Dimensions > maxDimensions:
		return bad("Dimensions", c.Dimensions, fmt.Sprintf("must be in [1, %d]", maxDimensions))
	case !finite(c.ErrorMax) || c.ErrorMax <= 0:
		return bad("ErrorMax", c.ErrorMax, "must be > 0")
	case !finite(c.CE) || c.CE <= 0 || c.CE > 1:
		return bad("CE", c.CE, "must be in (0, 1]")
	case !finite(c.CC) || c.CC <= 0 || c.CC > 1:
		return bad("CC", c.CC, "must be in (0, 1]")
	case !finite(c.CCStart) || c.CCStart < 0 || c.CCStart > 2:
		return bad("CCStart", c.CCStart, "must be in [0, 2]")
	case c.CCStartSamples < 0:
		return bad("CCStartSamples", c.CCStartSamples, "must be ≥ 0")
	case !finite(c.HeightMin) || c.HeightMin < 0 || c.HeightMin > 1:
		return bad("HeightMin", c.HeightMin, "must be in [0, 1] s")
	case c.LatencyFilterSize < 1 || c.LatencyFilterSize > 64:
		return bad("LatencyFilterSize", c.LatencyFilterSize, "must be in [1, 64]")
	case c.MaxFilterPeers < 1:
		return bad("MaxFilterPeers", c.MaxFilterPeers, "must be ≥ 1")
	case !finite(c.GravityRho) || c.GravityRho < 0:
		return bad("GravityRho", c.GravityRho, "must be ≥ 0 s")
	case c.NeighborWindow < 0 || c.NeighborWindow > 4096:
		return bad("NeighborWindow", c.NeighborWindow, "must be in [0, 4096]")
	case !finite(c.SettledError) || c.SettledError < 0:
		return bad("SettledError", c.SettledError, "must be ≥ 0")
	case !finite(c.HeightShare) || c.HeightShare < 0 || c.HeightShare >= 1:
		return bad("HeightShare", c.HeightShare, "must be in [0, 1)")
	case !finite(c.ResidualClip) || c.ResidualClip < 0:
		return bad("ResidualClip", c.ResidualClip, "must be ≥ 0")
	case !finite(c.RelativeForce) || c.RelativeForce < 0 || c.RelativeForce > 2:
		return bad("RelativeForce", c.RelativeForce, "must be in [0, 2]")
	case !finite(c.StartHeight) || c.StartHeight < 0 || c.StartHeight > 1:
		return bad("StartHeight", c.StartHeight, "must be in [0, 1]")
	case c.StartHeightSamples < 0:
		return bad("StartHeightSamples", c.StartHeightSamples, "must be ≥ 0")
	case !finite(c.EarlyConfidence) || c.EarlyConfidence < 0 || c.EarlyConfidence > 1:
		return bad("EarlyConfidence", c.EarlyConfidence, "must be in [0, 1]")
	case !finite(c.OutlierFactor) || c.OutlierFactor < 0:
		return bad("OutlierFactor", c.OutlierFactor, "must be ≥ 0")
	case c.OutlierAfter < 0:
		return bad("OutlierAfter", c.OutlierAfter, "must be ≥ 0")
	case !finite(c.TriangleMargin) || c.TriangleMargin < 0:
		return bad("TriangleMargin", c.TriangleMargin, "must be ≥ 0")
	case !finite(c.OutlierMin) || c.OutlierMin < 0:
		return bad("OutlierMin", c.OutlierMin, "must be ≥ 0")
	case !finite(c.RemoteErrorMin) || c.RemoteErrorMin < 0 || c.RemoteErrorMin > c.ErrorMax:
		return bad("RemoteErrorMin", c.RemoteErrorMin, "must be in [0, ErrorMax]")
	}
	return nil
}

// ErrConfig is wrapped by NewClient's error for an invalid Config.
var ErrConfig = errors.New("vivaldi: invalid config")
