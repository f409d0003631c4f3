package repel

import (
	"fmt"
	"math"
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
)

// Config holds the parameters of the token method. Every node of one swarm
// must use the same Tokens, Model, RepelPower, Lambda and MinDistance: they
// define the potential the nodes descend together; under a Fraction the
// same Fraction, MaxTokens and Capacity too (a report of more peers than
// Capacity + 1 is refused as a lie that would inflate the count).
type Config struct {
	// Tokens is S, the number of tokens and so of superpeers; with a
	// Fraction, the count a node starts from.
	Tokens int
	// Fraction, when positive, makes the count follow Fraction times the
	// network size (Lo et al.'s "predefined portion" of superpeers): the
	// holders count the network by the reports their announcements carry
	// and agree on the count, tokens are minted or retired one at a time
	// as it changes (see "A fraction of the network" in the package doc).
	// 0 keeps Tokens fixed. Every node of one swarm must use the same.
	Fraction float64
	// MaxTokens bounds the count under a Fraction (0: 1024): each node
	// keeps a table entry per token, and every token's announcements reach
	// every node.
	MaxTokens int

	// Model is the potential: Repulsion (Lo et al.'s) or Attract (ours).
	Model Model
	// RepelPower is p in the repulsion law |F| = 1/d^p. 2 (Coulomb, φ = 1/d)
	// repels strongly at short range and little at long range; 1 (φ = −ln d)
	// reaches further and pushes harder toward the rim.
	RepelPower float64
	// Lambda weighs the repulsion term of Attract, in seconds^p: with p = 2
	// it adds λ/d seconds of mean client RTT per pair of tokens d apart, so
	// 1e-5 costs 1 ms at 10 ms apart and nothing that matters at 100 ms.
	// Ignored by Repulsion.
	Lambda float64
	// MinDistance clamps token distances from below so two tokens on one
	// spot repel finitely.
	MinDistance time.Duration
	// Capacity is C, the most clients a superpeer serves (the attach
	// protocol's); 0 is unbounded. Attract then weighs a position by a
	// capacitated assignment: the clients' places with the other tokens at
	// most C each, and this token serving the C that gain most by it (see
	// the potential). The selector sets it from its attach options when it
	// is 0.
	Capacity int

	// ForceThreshold gates the move decision as Lo et al. do: a holder
	// considers moving only when |F| passes it (Repulsion: 1/s^p; Attract:
	// clients' unit pulls averaged, dimensionless, plus λ-weighted
	// repulsion). 0 leaves the gate to MinGain alone.
	ForceThreshold float64
	// MinGain is the least drop in the token's potential worth a move,
	// relative to the token's own share of it: for Repulsion its whole
	// potential, for Attract the RTT of the clients it serves (so 0.01 means
	// "improves my clients' RTT by about 1%"), but never less than an even
	// 1/Tokens split of the potential. It must be positive:
	// every move then lowers the system potential by a positive amount over
	// a finite set of positions, so moves stop.
	MinGain float64
	// SettledMinGain replaces MinGain once the token has settled: a
	// superpeer with clients should move only for a clear gain, not for
	// Vivaldi jitter.
	SettledMinGain float64
	// CoolingMoves: every this many moves on a token's count (Token.Moves)
	// double the gain its next move needs. In one static view the potential
	// alone makes moves stop; across holders whose views differ it does not
	// (seen on PlanetLab with digests, where a token kept being passed
	// around: experiments/README.md, "How the defaults were chosen"), and
	// cooling bounds the moves anyway. 0 disables cooling.
	CoolingMoves int
	// CoolingRest is how long a settled token must rest to take one move
	// off its count, so that it can follow a changing swarm at that pace.
	CoolingRest time.Duration
	// DigestSize is how many points of its attached clients (Peer.Attached)
	// a holder puts in each announcement (Token.Digest), chosen by the
	// greedy k-median of the clients' coordinates and weighted by the
	// clients nearest each. With it every
	// holder sees the whole swarm's clients in outline, not only its own and
	// its neighbours. 0 sends none. At most MaxDigest.
	DigestSize int
	// MaxCandidates bounds the peers a holder scores per decision (a random
	// sample when it knows more); 0 scores them all.
	MaxCandidates int
	// ProbeTTL: a holder measures the RTT to every other live holder and to
	// each of its attached clients (Ready.Probes, answered with Measured;
	// one Vivaldi exchange each in the live selector) and measures each
	// again once its measurement is ProbeTTL old. Its digest then carries
	// its clients' measured RTTs (Sample.RTT), which the other holders use
	// in place of the coordinates' prediction of those clients' cost, and
	// SiteRTT uses the holders'. 0 measures nothing.
	ProbeTTL time.Duration
	// SiteRTT: two holders whose measured RTT is below it share a site,
	// and the one whose token version loses the fencing order (Beats:
	// the lower epoch, then the lower holder key) moves its token away —
	// two superpeers there would serve one crowd. Coordinates cannot tell:
	// on PlanetLab Vivaldi puts some pairs of hosts of one site far apart,
	// and tokens settled on both (figures: experiments/README.md, "How the
	// defaults were chosen"). 0 disables it; it needs ProbeTTL.
	SiteRTT time.Duration

	// SurveyInterval: a settled holder checks its place by measurement
	// this long after settling. It ranks its attached clients by their
	// predicted distance to the others (the 1-median of its cluster in the
	// coordinates), asks the first SurveyCandidates of them to measure
	// their RTT to itself and to a sample of SurveyClients of its clients
	// (MsgSurvey), compares the sums with its own measurements of the same
	// clients (ProbeTTL) and, if one candidate is better by SurveyGain,
	// hands it the token (Token.Surveyed: it stays settled). A survey that
	// finds no better place doubles the wait before the next, up to
	// maxSurveyBackoff×. The coordinates bring a token near its clients,
	// but on PlanetLab a greedy k-median over them is markedly worse than
	// over the true RTTs, so the last step is measured. A settled token
	// still moves on the coordinates' word for SettledMinGain: a survey
	// weighs only the holder's own clients, and the capacitated potential
	// is what places two tokens in a crowd too big for one (without it a
	// simulator run on PlanetLab sent such a crowd's overflow to distant
	// superpeers). Figures: experiments/README.md, "How the defaults were
	// chosen". 0 disables surveys; they need ProbeTTL.
	SurveyInterval time.Duration
	// RegionSurveys: every other survey of a settled holder whose last
	// one kept its place is a region survey. It asks the peers of other
	// tokens' digests that are served worst (the points' weight times the
	// RTT their holder measured to them) to measure their RTT to every
	// such point, and moves the token to the candidate that would save
	// those clients more, by SurveyGain of the clients' summed RTT, than
	// its own clients lose without it (their RTT to the next holder as
	// the coordinates predict it). The coordinates' moves weigh a faraway
	// region in predictions, and on PlanetLab they misplace some regions
	// enough that a token in a crowd never sees the gain of leaving it
	// for a region served from afar (experiments/README.md,
	// `repel-cooling`). Both sides respect Capacity (repel/doc.go,
	// "Surveys"). Needs SurveyInterval. On by default: over `peer
	// experiment repel`'s 48 runs they take the mean client RTT from
	// 1.009× to 1.004× the greedy k-median and the worst from 1.087× to
	// 1.073×, at 13% more time to rest (experiments/README.md, `repel`).
	RegionSurveys bool
	// SurveyCandidates is how many candidates one survey measures.
	SurveyCandidates int
	// SurveyClients is how many of its clients (a seeded sample if it has
	// more) a holder asks each candidate to measure, besides itself; at
	// most MaxSurveyClients-1.
	SurveyClients int
	// SurveyGain is the least drop in the clients' summed RTT, relative to
	// the holder's, that moves the token to a surveyed candidate; for a
	// token that a survey brought, doubled for every CoolingMoves moves on
	// its count.
	SurveyGain float64
	// SurveyFloor is the least drop in their mean RTT that moves it: on a
	// LAN, where every RTT is a fraction of a millisecond, 2% is noise
	// (how the default was chosen: experiments/README.md, `repel`).
	SurveyFloor time.Duration
	// SurveyTimeout is how long a candidate measures for a survey before
	// it reports what it has (the holder waits MoveTimeout more).
	SurveyTimeout time.Duration
	// SurveyCheck is the share by which a candidate's report may claim
	// less than the holder can check before the holder refuses it
	// (EventSurveyRefused) and skips that candidate for
	// maxSurveyBackoff × SurveyInterval: its RTT to the holder against
	// the holder's measurement of it; its RTTs to the other candidates
	// against theirs to it (two of them at least, and most); its summed
	// RTT to the clients against the sum over them of the holder's RTT
	// less the holder's RTT to the candidate (the triangle inequality) —
	// each short by more than this share and SurveyFloor a peer. A
	// candidate that halves its RTTs to the clients to win the token is
	// refused; one that knows which peers the holder can check, and the
	// holder's RTTs, can still shrink the rest as far as that sum
	// (experiments/README.md, `attacks`). 0 takes every report as said.
	SurveyCheck float64

	// CoordCheck is how far a peer's coordinate may put it from this
	// holder, against the RTT the holder measured to it (its attached
	// clients'), before the holder leaves it out of where its token
	// goes (EventCoordMisfit): as a client of the potential, a point of
	// the digest and a candidate to move to or survey. The coordinate
	// misfits when the distance it predicts is above (1+CoordCheck)·RTT
	// + CoordFloor; one that puts the client nearer than measured is
	// taken (on the Internet a detour makes many an RTT longer than any
	// coordinate predicts). Any peer the holder is about to offer its
	// token to — a client, another peer it knows, a point of another
	// token's digest — is measured first and passed over if it misfits. It is meant against liars claiming a place
	// off to one side (frog-boiling's drift together), whose pull would
	// draw tokens to serve a cloud that is not there; a client left out
	// is still served, by the RTTs its holder measures. 0, the default,
	// trusts every coordinate: what the check gains and costs is measured
	// in experiments/README.md, `attacks` ("A check of clients'
	// coordinates against their holder's RTT").
	CoordCheck float64
	// CoordFloor is the slack CoordCheck gives in absolute terms: short
	// RTTs are measured to a few milliseconds of a coordinate at best.
	CoordFloor time.Duration

	// MoveInterval is how often a holder reconsiders its token's place; the
	// first check after taking a token waits this long so the new holder
	// hears the others first. Jittered uniformly over [½, 1½]×.
	MoveInterval time.Duration
	// MoveTimeout is how long a holder waits for the ack of a move before it
	// gives up and keeps the token (it still holds it all along).
	MoveTimeout time.Duration
	// AnnounceInterval is how often a settled holder re-announces.
	AnnounceInterval time.Duration
	// MovingAnnounceInterval is how often an unsettled holder re-announces;
	// a new holder also announces at once.
	MovingAnnounceInterval time.Duration
	// SettleAfter is T_settle: holding a token this long makes a superpeer.
	SettleAfter time.Duration
	// DeadAfter is T_dead: a token unheard this long is minted again by the
	// XOR-closest live peer to its name that holds no token. The next
	// closest tries after 2·DeadAfter, the next after 3·DeadAfter, and so
	// on, in case the closer ones are gone too.
	DeadAfter time.Duration
	// JoinWait replaces DeadAfter for a token the node has never heard of
	// since it started (0: DeadAfter). A swarm started all at once has no
	// token to hear of, and a full DeadAfter only delays the first mints; a
	// peer that joins a running swarm hears of its tokens within a few
	// announcements, and a token that has moved since it was minted has an
	// epoch above 1 and beats a mint of it. Validate asks for at least
	// 2×AnnounceInterval and at most DeadAfter.
	JoinWait time.Duration

	// Guard makes a token change hands only by its holder's own hand-over
	// while that holder lives (Node.observe): a fresher version that does
	// not trace to the known one by a signed hand-over is taken only once
	// the known holder has been silent for DeadAfter, and given up again
	// if that holder says it still holds. Without it (the default) any
	// fresher version fences the one known, so any peer can take any token
	// by announcing a higher epoch (experiments/README.md, `attacks`). The
	// price: after a partition longer than DeadAfter a token minted on
	// both sides stays held on both until one holder leaves; without the
	// guard the higher epoch fences the other at once.
	Guard bool
}

// DefaultConfig is tuned for peers on the Internet: announcements every 30 s
// keep gossip traffic to one small message per token per 30 s once settled;
// a token is declared dead after three missed announcements and some slack;
// a minute of holding makes a superpeer, long enough that a token still
// moving every few seconds does not flap its holders' roles.
func DefaultConfig() Config {
	return Config{
		Tokens:                 8,
		Model:                  Attract,
		RepelPower:             2,
		Lambda:                 0,
		MinDistance:            time.Millisecond,
		ForceThreshold:         0,
		MinGain:                0.01,
		SettledMinGain:         0.05,
		CoolingMoves:           4,
		CoolingRest:            10 * time.Minute,
		DigestSize:             16,
		MaxCandidates:          0,
		ProbeTTL:               10 * time.Minute,
		SiteRTT:                2 * time.Millisecond,
		MoveInterval:           5 * time.Second,
		MoveTimeout:            5 * time.Second,
		AnnounceInterval:       30 * time.Second,
		MovingAnnounceInterval: 5 * time.Second,
		SettleAfter:            60 * time.Second,
		DeadAfter:              100 * time.Second,
		SurveyInterval:         time.Minute,
		SurveyCandidates:       8,
		SurveyClients:          128,
		SurveyGain:             0.02,
		SurveyFloor:            time.Millisecond,
		SurveyTimeout:          30 * time.Second,
		SurveyCheck:            0.1,
		CoordFloor:             10 * time.Millisecond,
		RegionSurveys:          true,
	}
}

// LocalConfig is for swarms in one process or one LAN, where RTTs are
// sub-millisecond and a test should converge in seconds.
func LocalConfig() Config {
	c := DefaultConfig()
	c.MoveInterval = 200 * time.Millisecond
	c.MoveTimeout = 200 * time.Millisecond
	c.AnnounceInterval = time.Second
	c.MovingAnnounceInterval = 200 * time.Millisecond
	c.SettleAfter = 2 * time.Second
	c.DeadAfter = 3500 * time.Millisecond
	c.CoolingRest = 20 * time.Second
	c.MinDistance = 10 * time.Microsecond
	// In one process or on one LAN every pair of peers is within a
	// millisecond: RTTs cannot tell sites apart.
	c.SiteRTT = 0
	c.ProbeTTL = 20 * time.Second
	// Nor can they tell one place from another: no surveys.
	c.SurveyInterval = 0
	c.SurveyTimeout = 2 * time.Second
	return c
}

// Dilated is c for a network whose time runs f times slower than the
// clock — every link latency and every timer f times longer, RTTs measured
// divided by f (vivaldi.WithTimeScale) — as the swarm's time dilation runs
// it: every timer is f times longer; what is measured in RTTs (MinDistance,
// SiteRTT, SurveyFloor) stays.
func (c Config) Dilated(f float64) Config {
	d := func(x *time.Duration) { *x = time.Duration(float64(*x) * f) }
	for _, x := range []*time.Duration{
		&c.CoolingRest, &c.ProbeTTL, &c.SurveyInterval, &c.SurveyTimeout, &c.MoveInterval,
		&c.MoveTimeout, &c.AnnounceInterval, &c.MovingAnnounceInterval, &c.SettleAfter, &c.DeadAfter, &c.JoinWait,
	} {
		d(x)
	}
	return c
}

// defaultMaxTokens is MaxTokens' default.
const defaultMaxTokens = 1024

// maxTokens is the most tokens a node accepts: Tokens without a Fraction,
// MaxTokens (or its default) with one.
func (c Config) maxTokens() int {
	switch {
	case c.Fraction <= 0:
		return c.Tokens
	case c.MaxTokens > 0:
		return c.MaxTokens
	}
	return defaultMaxTokens
}

// joinWait is JoinWait or its default.
func (c Config) joinWait() time.Duration {
	if c.JoinWait > 0 {
		return c.JoinWait
	}
	return c.DeadAfter
}

// census is the census configuration of a node under a Fraction. A new
// count holds at least until a token minted for it can have settled and
// drawn its clients (the reports made before are of the old placement),
// a report lives as long as its token would without announcements, and
// three in four tokens' reports are needed.
func (c Config) census() census.Config {
	return census.Config{
		Fraction: c.Fraction,
		Max:      c.maxTokens(),
		HoldDown: c.joinWait() + c.SettleAfter + 2*c.AnnounceInterval,
		Expire:   c.DeadAfter,
		// Every holder's announcements reach every node, so a table can
		// hold every token's report; a count is proposed only once three
		// in four tokens have settled and reported (one still placing
		// itself and gathering its clients would count too few, so the
		// unsettled are left out and the others' share extrapolated), and
		// then by the median of the reports' estimates beside the
		// proposer's own. Waiting for every token (Quorum 1, the sum then
		// exact) never proposed at 10 000 peers: with 33 tokens surveys
		// keep some moving, and the tables held 21 to 31 reports through
		// 23 minutes of virtual time (experiments/README.md, growth).
		MaxReports: c.maxTokens(),
		Quorum:     0.75,
		// A report is refreshed every AnnounceInterval: a client that
		// moved from one holder to another is counted by both until the
		// first reports again.
		ConfirmFor: 2 * c.AnnounceInterval,
	}
}

// Validate names the first field that makes no sense.
func (c Config) Validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.Tokens <= 0 || int64(c.Tokens) > math.MaxUint32:
		return fmt.Errorf("repel: Tokens %d out of range (1..2^32-1)", c.Tokens)
	case math.IsNaN(c.Fraction) || c.Fraction < 0 || c.Fraction > 1:
		return fmt.Errorf("repel: Fraction %v not in [0, 1]", c.Fraction)
	case c.MaxTokens < 0 || int64(c.MaxTokens) > math.MaxUint32:
		return fmt.Errorf("repel: MaxTokens %d out of range (0..2^32-1)", c.MaxTokens)
	case c.Fraction > 0 && c.Tokens > c.maxTokens():
		return fmt.Errorf("repel: Tokens %d over MaxTokens %d", c.Tokens, c.maxTokens())
	case c.Model != Repulsion && c.Model != Attract:
		return fmt.Errorf("repel: unknown Model %v", c.Model)
	case !finite(c.RepelPower) || c.RepelPower < 1:
		return fmt.Errorf("repel: RepelPower %v must be ≥ 1", c.RepelPower)
	case !finite(c.Lambda) || c.Lambda < 0:
		return fmt.Errorf("repel: Lambda %v must be ≥ 0", c.Lambda)
	case c.MinDistance <= 0:
		return fmt.Errorf("repel: MinDistance %v must be positive", c.MinDistance)
	case c.Capacity < 0:
		return fmt.Errorf("repel: Capacity %d must be ≥ 0", c.Capacity)
	case !finite(c.ForceThreshold) || c.ForceThreshold < 0:
		return fmt.Errorf("repel: ForceThreshold %v must be ≥ 0", c.ForceThreshold)
	case !finite(c.MinGain) || c.MinGain <= 0:
		return fmt.Errorf("repel: MinGain %v must be positive (it makes moves stop)", c.MinGain)
	case !finite(c.SettledMinGain) || c.SettledMinGain < c.MinGain:
		return fmt.Errorf("repel: SettledMinGain %v must be ≥ MinGain", c.SettledMinGain)
	case c.CoolingMoves < 0:
		return fmt.Errorf("repel: CoolingMoves %d must be ≥ 0", c.CoolingMoves)
	case c.CoolingMoves > 0 && c.CoolingRest <= 0:
		return fmt.Errorf("repel: CoolingRest %v must be positive", c.CoolingRest)
	case c.DigestSize < 0 || c.DigestSize > maxDigest:
		return fmt.Errorf("repel: DigestSize %d out of range (0..%d)", c.DigestSize, maxDigest)
	case c.MaxCandidates < 0:
		return fmt.Errorf("repel: MaxCandidates %d must be ≥ 0", c.MaxCandidates)
	case c.ProbeTTL < 0:
		return fmt.Errorf("repel: ProbeTTL %v must be ≥ 0", c.ProbeTTL)
	case c.SiteRTT < 0:
		return fmt.Errorf("repel: SiteRTT %v must be ≥ 0", c.SiteRTT)
	case c.SiteRTT > 0 && c.ProbeTTL == 0:
		return fmt.Errorf("repel: SiteRTT %v needs ProbeTTL > 0 (holders must measure each other)", c.SiteRTT)
	case c.SurveyInterval < 0:
		return fmt.Errorf("repel: SurveyInterval %v must be ≥ 0", c.SurveyInterval)
	case c.SurveyInterval > 0 && c.ProbeTTL == 0:
		return fmt.Errorf("repel: SurveyInterval %v needs ProbeTTL > 0 (a holder compares with its own measurements)", c.SurveyInterval)
	case c.SurveyInterval > 0 && c.SurveyCandidates < 1:
		return fmt.Errorf("repel: SurveyCandidates %d must be ≥ 1", c.SurveyCandidates)
	case c.SurveyInterval > 0 && (c.SurveyClients < 1 || c.SurveyClients > maxSurveyClients-1):
		return fmt.Errorf("repel: SurveyClients %d out of range (1..%d)", c.SurveyClients, maxSurveyClients-1)
	case c.SurveyInterval > 0 && (!finite(c.SurveyGain) || c.SurveyGain <= 0):
		return fmt.Errorf("repel: SurveyGain %v must be positive", c.SurveyGain)
	case c.SurveyFloor < 0:
		return fmt.Errorf("repel: SurveyFloor %v must be ≥ 0", c.SurveyFloor)
	case c.SurveyInterval > 0 && c.SurveyTimeout <= 0:
		return fmt.Errorf("repel: SurveyTimeout %v must be positive", c.SurveyTimeout)
	case !finite(c.SurveyCheck) || c.SurveyCheck < 0 || c.SurveyCheck >= 1:
		return fmt.Errorf("repel: SurveyCheck %v not in [0, 1)", c.SurveyCheck)
	case !finite(c.CoordCheck) || c.CoordCheck < 0:
		return fmt.Errorf("repel: CoordCheck %v must be ≥ 0", c.CoordCheck)
	case c.CoordFloor < 0:
		return fmt.Errorf("repel: CoordFloor %v must be ≥ 0", c.CoordFloor)
	case c.MoveInterval <= 0:
		return fmt.Errorf("repel: MoveInterval %v must be positive", c.MoveInterval)
	case c.MoveTimeout <= 0:
		return fmt.Errorf("repel: MoveTimeout %v must be positive", c.MoveTimeout)
	case c.AnnounceInterval <= 0 || c.MovingAnnounceInterval <= 0:
		return fmt.Errorf("repel: AnnounceInterval %v and MovingAnnounceInterval %v must be positive", c.AnnounceInterval, c.MovingAnnounceInterval)
	case c.SettleAfter <= 0:
		return fmt.Errorf("repel: SettleAfter %v must be positive", c.SettleAfter)
	case c.DeadAfter <= 2*c.AnnounceInterval:
		// A live settled token must be heard at least twice per DeadAfter,
		// or one lost announcement gets it re-minted.
		return fmt.Errorf("repel: DeadAfter %v must exceed 2×AnnounceInterval (%v)", c.DeadAfter, 2*c.AnnounceInterval)
	case c.JoinWait != 0 && (c.JoinWait < 2*c.AnnounceInterval || c.JoinWait > c.DeadAfter):
		// A joining peer must have had two announcements of every live
		// token to hear of it before it may mint one.
		return fmt.Errorf("repel: JoinWait %v must be 0 or within [2×AnnounceInterval (%v), DeadAfter (%v)]", c.JoinWait, 2*c.AnnounceInterval, c.DeadAfter)
	}
	return nil
}
