package repel

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// MsgType names a message of the token protocol.
type MsgType uint8

const (
	// MsgAnnounce gossips a token version from its holder to every peer
	// (To is empty: publish on the topic). From must be Token.Holder.
	MsgAnnounce MsgType = iota + 1
	// MsgMove offers a token to To: Token is the new version, with To as
	// holder and a higher epoch. The sender keeps holding its own version
	// until the ack.
	MsgMove
	// MsgMoveAck accepts a move: Token is the version now held by From.
	MsgMoveAck
	// MsgMoveRefuse declines a move: Token is the version offered, Reason
	// says why.
	MsgMoveRefuse
	// MsgSurvey asks To, a candidate place for the sender's settled token
	// (Token, the sender's version), to measure its RTT to each peer of
	// Survey (the sender first, then a sample of its clients, then the
	// other holders) and report.
	MsgSurvey
	// MsgSurveyReport answers a survey: Token is the surveyed version, RTTs
	// the RTT in seconds to each peer of the survey in its order (negative:
	// not measured). No RTTs at all: the peer declined (see onSurvey).
	MsgSurveyReport
)

func (t MsgType) String() string {
	switch t {
	case MsgAnnounce:
		return "announce"
	case MsgMove:
		return "move"
	case MsgMoveAck:
		return "move-ack"
	case MsgMoveRefuse:
		return "move-refuse"
	case MsgSurvey:
		return "survey"
	case MsgSurveyReport:
		return "survey-report"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// refuseReason says why a move was declined (Message.Reason).
type refuseReason uint8

const (
	// refuseNone is the zero value, carried by every message but a refusal.
	refuseNone refuseReason = iota
	// refuseHolding: the peer already holds a token (at most one per peer).
	refuseHolding
	// refuseStale: the peer knows a fresher version of the offered token,
	// so the offer comes from a holder that has already lost it.
	refuseStale
)

func (r refuseReason) String() string {
	switch r {
	case refuseNone:
		return "none"
	case refuseHolding:
		return "holding"
	case refuseStale:
		return "stale"
	}
	return fmt.Sprintf("RefuseReason(%d)", uint8(r))
}

// Message is one protocol message, in or out. The adapter sends To == ""
// (an announcement) to everyone by its Dissemination, piggybacked on the
// Vivaldi exchanges or published on GossipSub, and anything else on a stream
// to that peer; it fills From on receipt from the authenticated sender.
type Message struct {
	Type   MsgType
	From   string
	To     string
	Token  Token
	Reason refuseReason // why a MsgMoveRefuse declined: "holding" or "stale" (%v); zero otherwise
	// Survey lists the peers a MsgSurvey asks To to measure.
	Survey []string
	// RTTs is a MsgSurveyReport's measurements, in seconds, one per peer
	// of the survey (negative: not measured).
	RTTs []float64
}

// EventKind names something that happened to this node's token, for logs,
// counters and the simulator's metrics.
type EventKind uint8

const (
	// EventMinted: this node minted Token (first time or after T_dead).
	EventMinted EventKind = iota + 1
	// EventAccepted: this node took Token in a move.
	EventAccepted
	// EventMoveOffered: this node offered its token as Token (to Token.Holder).
	EventMoveOffered
	// EventMovedAway: the offer was acked; this node dropped its token.
	EventMovedAway
	// EventMoveTimedOut: no ack in MoveTimeout; this node keeps its token.
	EventMoveTimedOut
	// EventMoveRefused: the candidate refused; this node keeps its token.
	EventMoveRefused
	// EventFenced: a fresher version of this node's token exists (Token);
	// this node dropped its own.
	EventFenced
	// EventSettled: this node's token settled; it is a superpeer.
	EventSettled
	// EventSiteShared: this node measured the holder of a fresher token
	// within Config.SiteRTT and offers its own token away (Token is the
	// offer; EventMoveOffered follows).
	EventSiteShared
	// EventSurvey: this node, a settled holder, asked candidates to
	// measure its clients (Config.SurveyInterval).
	EventSurvey
	// EventSurveyMoved: a survey measured a candidate better for the
	// clients by SurveyGain; this node offers it the token (Token is the
	// offer; EventMoveOffered follows).
	EventSurveyMoved
	// EventSurveyRefused: a survey candidate's report claimed less than
	// this node's own measurements allow (Config.SurveyCheck); the node
	// weighs the survey without it. Token is this node's token with the
	// candidate as Holder.
	EventSurveyRefused
	// EventSurveyKept: a survey found no better place; the token stays.
	EventSurveyKept
	// EventRetired: the agreed count (Config.Fraction) fell to Token.ID or
	// below; this node dropped its token, and its clients go to the
	// remaining holders.
	EventRetired
	// EventCounted: this node proposed a new count (Token is its
	// announcement carrying it).
	EventCounted
	// EventUntraced: this node refused Token, a fresher version it cannot
	// trace to the holder of the version it knows while that holder lives
	// (see Node.observe): a forged version, or a mint over a live holder.
	EventUntraced
	// EventReverted: the holder of a version this node had replaced by an
	// untraced one announced that it still holds (Token); this node went
	// back to it, and dropped its own token if it held the rival's.
	EventReverted
	// EventRegionMoved: a region survey (Config.RegionSurveys) measured a
	// peer among another token's clients that would save those clients
	// more than this node's clients lose without it; this node offers it
	// the token (Token is the offer; EventMoveOffered follows).
	EventRegionMoved
	// EventCoordMisfit: an attached client's coordinate disagrees with
	// this node's own measurement of its RTT (Config.CoordCheck); the
	// node leaves it out of where its token goes while it does. Token is
	// this node's token with the client as Holder; once a client, until
	// it fits again.
	EventCoordMisfit

	// lastEvent is the last EventKind.
	lastEvent = EventCoordMisfit
)

// EventKinds are every EventKind, in order: what a log or a metric names
// by k.String() in the selector's Stats.
func EventKinds() []EventKind {
	ks := make([]EventKind, 0, lastEvent)
	for k := EventMinted; k <= lastEvent; k++ {
		ks = append(ks, k)
	}
	return ks
}

func (k EventKind) String() string {
	switch k {
	case EventMinted:
		return "minted"
	case EventAccepted:
		return "accepted"
	case EventMoveOffered:
		return "move-offered"
	case EventMovedAway:
		return "moved-away"
	case EventMoveTimedOut:
		return "move-timed-out"
	case EventMoveRefused:
		return "move-refused"
	case EventFenced:
		return "fenced"
	case EventSettled:
		return "settled"
	case EventSiteShared:
		return "site-shared"
	case EventSurvey:
		return "survey"
	case EventSurveyMoved:
		return "survey-moved"
	case EventSurveyRefused:
		return "survey-refused"
	case EventSurveyKept:
		return "survey-kept"
	case EventRetired:
		return "retired"
	case EventCounted:
		return "counted"
	case EventUntraced:
		return "untraced"
	case EventReverted:
		return "reverted"
	case EventRegionMoved:
		return "region-moved"
	case EventCoordMisfit:
		return "coord-misfit"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one EventKind with the token version it concerns.
type Event struct {
	Kind  EventKind
	Token Token
}

// Ready is what one Tick or Step produced: messages to send, in order, the
// role after it, and what happened.
type Ready struct {
	Messages []Message
	// Role is superpeer.Superpeer once this node's token has settled,
	// superpeer.Client otherwise (a holder whose token has not settled
	// too: Node.Held tells it apart); RoleChanged is set when the role
	// changed or a token was taken or dropped.
	Role        superpeer.Role
	RoleChanged bool
	Events      []Event
	// Probes are peers whose RTT the node wants measured (other tokens'
	// holders and its attached clients, see Config.ProbeTTL), each to be
	// answered with Measured.
	Probes []string
}

// Peer is what the node is told about another peer it believes live: a
// Vivaldi neighbour, an attached client, or a routing-table entry. A peer
// without a coordinate (empty Vec) still counts for XOR-closeness when a
// token is minted, but is neither a move candidate nor a client in the
// potential.
type Peer struct {
	ID    string
	Key   Key
	Coord vivaldi.Coord
	// Attached marks a client attached to this node (as the holder of its
	// token): those are the clients the token serves, summarised in the
	// token's digest.
	Attached bool
}

// Errors returned by Step for messages that make no sense. The node's state
// is unchanged when Step returns one; the adapter should count it by name.
var (
	errUnknownType     = errors.New("repel: unknown message type")
	errTokenOutOfRange = errors.New("repel: token ID out of range")
	errNotForMe        = errors.New("repel: directed message for another peer")
	errNotHolder       = errors.New("repel: sender is not the holder the token names")
	errBadOffer        = errors.New("repel: move offer does not name this peer as holder")
	errInvalidCoord    = errors.New("repel: invalid token coordinate")
	errInvalidDigest   = errors.New("repel: invalid client digest")
	errInvalidCount    = errors.New("repel: invalid census count")
)

type tableEntry struct {
	tok       Token
	known     bool
	lastHeard time.Time // when the freshest version was last heard of (or start)
	// prev is the version this entry held before it took a version it
	// could not trace to prev's holder (a mint, a hand-over it missed the
	// steps of, or a forgery), kept until prev has been silent for
	// DeadAfter (from prevHeard): if prev's holder announces that it still
	// holds, the entry goes back to it. untraced is the epoch of the first
	// such version.
	prev      Token
	hasPrev   bool
	prevHeard time.Time
	prevSince time.Time
	untraced  uint64
	// contested: the entry went back to its holder's version over a rival;
	// while that holder, or the peers it handed the token to, are heard,
	// untraced versions are refused.
	contested bool
	since     time.Time // when the entry took its version
}

type pendingMove struct {
	offer    Token
	deadline time.Time
}

type held struct {
	tok          Token // the version this node holds; Holder is self
	settled      bool
	lastAnnounce time.Time
	nextCheck    time.Time
	lastOffered  uint64 // highest epoch this node has offered the token at
	// unanswered is the last offer whose answer never came (timed out;
	// zero: none): its taker may have taken it and handed it on.
	unanswered Token
	rival      uint64    // the highest epoch of a version of this token refused as untraced
	lastCool   time.Time // when Moves last came down (or the token settled)
	pending    *pendingMove
	// awaiting is the candidate whose RTT the coordinate check waits for
	// (checkCandidate); its answer brings the next move check forward.
	awaiting string
	// Surveys (Config.SurveyInterval), once settled: the one in flight,
	// when the next is due, the wait after it, and whether one has found
	// this place the best.
	survey     *survey
	nextSurvey time.Time
	surveyWait time.Duration
	surveyed   bool
	// With RegionSurveys: whether a survey of the clients and a region
	// survey have kept the place (surveyed is both), and whether the
	// next survey is a region survey.
	clusterKept, regionKept, regionNext bool
}

// Node is one peer's pure token state machine. It does no I/O, starts no
// goroutine and reads no clock: time comes in with every call, randomness
// from the *rand.Rand it was given, and its decisions leave in Ready. A Node
// is not safe for concurrent use; the adapter owns it from one goroutine.
type Node struct {
	cfg   Config
	id    string
	key   Key
	rng   *rand.Rand
	coord vivaldi.Coord
	peers []Peer
	// mintGate, if set, must also allow a token before this node mints it
	// at its rank among the peers it knows (the live selector's: at rank 0
	// only on a lookup of its name answered since it went silent;
	// setMintGate).
	mintGate func(id uint32, rank int) bool

	started     bool
	tokens      []tableEntry
	held        *held
	role        superpeer.Role
	refused     map[string]time.Time // candidates that refused, until when to skip them
	lastMint    time.Time
	probes      map[string]probe     // measured RTTs to other holders and attached clients
	job         *surveyJob           // a holder's survey this node measures for
	surveyedFor map[string]time.Time // holders whose surveys it took lately, when
	cen         *census.Census       // the count under Config.Fraction (nil: fixed)

	ready Ready
}

// NewNode makes the state machine of peer id with kad key key (PeerKey(id)
// for a libp2p peer). rng drives the jitter and candidate sampling; seed it
// for reproducible runs.
func NewNode(id string, key Key, cfg Config, rng *rand.Rand) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, errors.New("repel: empty peer ID")
	}
	if rng == nil {
		return nil, errors.New("repel: nil rng")
	}
	var cen *census.Census
	if cfg.Fraction > 0 {
		var err error
		if cen, err = census.New(cfg.census(), id, census.Value{S: cfg.Tokens}); err != nil {
			return nil, fmt.Errorf("repel: %w", err)
		}
	}
	return &Node{
		cen:     cen,
		cfg:     cfg,
		id:      id,
		key:     key,
		rng:     rng,
		role:    superpeer.Client,
		tokens:  make([]tableEntry, cfg.Tokens),
		refused: make(map[string]time.Time),
		probes:  make(map[string]probe),

		surveyedFor: make(map[string]time.Time),
	}, nil
}

// Role is the node's current role.
func (n *Node) Role() superpeer.Role { return n.role }

// Held returns the token version this node holds, if any.
func (n *Node) Held() (Token, bool) {
	if n.held == nil {
		return Token{}, false
	}
	return copyToken(n.held.tok), true
}

// Moving reports whether the node has offered its token and awaits the ack.
func (n *Node) Moving() bool { return n.held != nil && n.held.pending != nil }

// pendingOffer is the token version this node has offered (Holder the
// peer it offered it to) while it awaits the answer.
func (n *Node) pendingOffer() (Token, bool) {
	if n.held == nil || n.held.pending == nil {
		return Token{}, false
	}
	return copyToken(n.held.pending.offer), true
}

// liveTokens returns the freshest known version of every token heard of
// within DeadAfter: the superpeers (or superpeers-to-be) a client may attach
// to, each with its holder's coordinate.
func (n *Node) liveTokens(now time.Time) []Token {
	var out []Token
	for _, e := range n.tokens {
		if e.known && now.Sub(e.lastHeard) < n.cfg.DeadAfter {
			out = append(out, copyToken(e.tok))
		}
	}
	return out
}

// validateAnnounce is the check a GossipSub topic validator should apply
// before a message reaches any node: from (the signed author) must be the
// holder the token names, the ID in range, the coordinate valid. Step applies
// it too; doing it in the validator stops bad announcements spreading.
func validateAnnounce(cfg Config, from string, t Token) error {
	if t.ID >= uint32(cfg.maxTokens()) {
		return fmt.Errorf("%w: %d ≥ %d", errTokenOutOfRange, t.ID, cfg.maxTokens())
	}
	if !validCount(t.Count, cfg.maxTokens()) {
		return errInvalidCount
	}
	if from != t.Holder {
		return errNotHolder
	}
	if !validCoord(t.Coord) {
		return errInvalidCoord
	}
	if !validDigest(t.Digest) {
		return errInvalidDigest
	}
	return nil
}

// SetCoord tells the node its own Vivaldi coordinate. A held token sits
// where its holder is; the new position goes out with the next announcement.
func (n *Node) SetCoord(c vivaldi.Coord) {
	n.coord = copyCoord(c)
	if n.held != nil {
		n.held.tok.Coord = copyCoord(c)
		n.tokens[n.held.tok.ID].tok.Coord = copyCoord(c)
	}
}

// SetPeers replaces the set of peers the node believes live: its Vivaldi
// neighbours and attached clients (with coordinates) and whatever else it
// knows from the DHT (for minting). The node keeps the slice; the caller
// must not modify it afterwards.
func (n *Node) SetPeers(peers []Peer) { n.peers = peers }

// setMintGate makes the node mint a token only while gate allows it too,
// given its rank among the peers it knows (SetPeers): the live selector
// lets a peer that ranks first mint only on a lookup of the token's name,
// as the peers it knows otherwise change with its connections (see
// Selector.mintGate). gate is called from Tick.
func (n *Node) setMintGate(gate func(id uint32, rank int) bool) { n.mintGate = gate }

func (n *Node) init(now time.Time) {
	if n.started {
		return
	}
	n.started = true
	// A fresh node has heard of no token; it gives the swarm JoinWait
	// (DeadAfter by default) to tell it before it concludes a token is
	// missing and mints it.
	for i := range n.tokens {
		n.tokens[i].lastHeard = now
	}
}

func (n *Node) takeReady() Ready {
	r := n.ready
	r.Role = n.role
	n.ready = Ready{}
	return r
}

func (n *Node) send(m Message) {
	m.From = n.id
	m.Token = copyToken(m.Token)
	n.ready.Messages = append(n.ready.Messages, m)
}

func (n *Node) event(k EventKind, t Token) {
	t = copyToken(t)
	n.ready.Events = append(n.ready.Events, Event{Kind: k, Token: t})
}

func (n *Node) setRole(r superpeer.Role) {
	if n.role != r {
		n.role = r
		n.ready.RoleChanged = true
	}
}

// jitter spreads d uniformly over [d/2, 3d/2). Two holders whose decisions
// fall within one gossip delay of each other decide on stale views of each
// other and can undo each other's moves; wide jitter makes that coincidence
// unlikely to repeat, so such cycles die out instead of locking in step.
func (n *Node) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(n.rng.Int64N(int64(d)+1))
}

// Tick advances the node's timers to now: settling, announcements, move
// timeouts and decisions, and re-minting of tokens unheard for DeadAfter.
func (n *Node) Tick(now time.Time) Ready {
	n.init(now)
	for p, until := range n.refused {
		if !now.Before(until) {
			delete(n.refused, p)
		}
	}
	if h := n.held; h != nil {
		if h.pending != nil && !now.Before(h.pending.deadline) {
			// The offer may still have been taken: if so the new holder's
			// announcement (a higher epoch) fences this copy off later. If
			// not, this node simply keeps the token. Either way it is held.
			n.event(EventMoveTimedOut, h.pending.offer)
			h.unanswered = h.pending.offer
			h.pending = nil
			h.nextCheck = now.Add(n.jitter(n.cfg.MoveInterval))
		}
		if !h.settled && now.Sub(h.tok.HeldSince) >= n.cfg.SettleAfter {
			n.settle(now)
		}
		if h.settled && h.tok.Moves > 0 && now.Sub(h.lastCool) >= n.cfg.CoolingRest {
			// Every CoolingRest at rest buys back one move, so a token can
			// follow a swarm that changes, but holders that disagree can
			// pass it around at most once per CoolingRest in the long run.
			h.tok.Moves--
			n.tokens[h.tok.ID].tok.Moves = h.tok.Moves
			h.lastCool = now
		}
		every := n.cfg.MovingAnnounceInterval
		if h.settled {
			every = n.cfg.AnnounceInterval
		}
		if now.Sub(h.lastAnnounce) >= every {
			n.announce(now)
		}
		n.countTick(now)
	}
	if h := n.held; h != nil {
		n.probe(now)
		n.surveyTick(now)
		if h.pending == nil && h.survey == nil && !now.Before(h.nextCheck) {
			h.nextCheck = now.Add(n.jitter(n.cfg.MoveInterval))
			n.maybeMove(now)
		}
	}
	if n.held == nil {
		n.maybeMint(now)
	}
	n.runJob(now)
	return n.takeReady()
}

func (n *Node) announce(now time.Time) {
	h := n.held
	h.lastAnnounce = now
	h.tok.Seq++
	h.tok.Issued = now
	h.tok.Digest = n.digest(now)
	h.tok.Count = n.report(now)
	h.tok.Rival = h.rival
	e := &n.tokens[h.tok.ID]
	e.lastHeard = now
	e.tok.Digest = copyDigest(h.tok.Digest)
	e.tok.Count = h.tok.Count
	n.send(Message{Type: MsgAnnounce, Token: h.tok})
}

// digest summarises the attached clients in at most DigestSize points: the
// greedy k-median of the clients in coordinate space (kmedianPicks), so the
// points sit where the clients are dense and the summary's own distance to
// the clients is small, and each point weighs as many clients as are
// nearest to it, so a far crowd counts for its size. (Farthest-point picks,
// the earlier rule, spread the points to the clients' outliers; on
// PlanetLab the k-median's 16 points served the other tokens as well as 32
// farthest-point ones.) A point's RTT is the mean RTT this node measured to
// the clients it stands for (those with a standing measurement; 0 if none
// has one): other holders weigh those clients by what they really have.
func (n *Node) digest(now time.Time) []Sample {
	k := n.cfg.DigestSize
	if k == 0 || !n.coordOK() {
		return nil
	}
	var cs []Peer
	misfit, _ := n.misfits(now)
	for _, p := range n.peers {
		if p.Attached && p.ID != n.id && validCoord(p.Coord) && len(p.Coord.Vec) == len(n.coord.Vec) && !misfit[p.ID] {
			cs = append(cs, p)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	picks := kmedianPicks(cs, k)
	out := make([]Sample, len(picks))
	for j, i := range picks {
		out[j] = Sample{ID: cs[i].ID, Key: cs[i].Key, Coord: copyCoord(cs[i].Coord)}
	}
	rsum := make([]float64, len(out))
	rcnt := make([]int, len(out))
	pick := make(map[int]int, len(picks)) // client index → its digest point
	for j, i := range picks {
		pick[i] = j
	}
	for i, c := range cs {
		// A picked client counts for its own point: with heights its
		// distance to itself is not 0, so it might be nearer another.
		best, ok := pick[i]
		if !ok {
			bd := math.Inf(1)
			for j := range out {
				if d := c.Coord.DistanceTo(out[j].Coord); d < bd {
					best, bd = j, d
				}
			}
		}
		out[best].Weight++
		if r, ok := n.MeasuredRTT(now, c.ID); ok {
			rsum[best] += r.Seconds()
			rcnt[best]++
		}
	}
	for j := range out {
		if rcnt[j] > 0 {
			out[j].RTT = rsum[j] / float64(rcnt[j])
		}
	}
	return out
}

// holders is the set of peers the table names as holders of a live token.
func (n *Node) holders(now time.Time) map[string]bool {
	m := make(map[string]bool, len(n.tokens))
	for _, e := range n.tokens {
		if e.known && now.Sub(e.lastHeard) < n.cfg.DeadAfter {
			m[e.tok.Holder] = true
		}
	}
	return m
}

// maybeMint mints the first token that has been unheard for long enough if
// this node's rank among the XOR-closest eligible peers to its name allows.
func (n *Node) maybeMint(now time.Time) {
	if !n.coordOK() {
		// A token without a position would sit at the origin of the field;
		// wait for Vivaldi to give this peer a place first.
		return
	}
	holders := n.holders(now)
	for i := range n.tokens {
		e := &n.tokens[i]
		silent := now.Sub(e.lastHeard)
		wait := n.cfg.DeadAfter
		if !e.known && n.cfg.JoinWait > 0 {
			wait = n.cfg.JoinWait
		}
		if silent < wait {
			continue
		}
		target := TokenKey(uint32(i))
		rank := 0
		for _, p := range n.peers {
			if p.ID == n.id || holders[p.ID] || (e.known && p.ID == e.tok.Holder) {
				continue
			}
			if target.Closer(p.Key, n.key) {
				rank++
			}
		}
		if int64((silent-wait)/n.cfg.DeadAfter) < int64(rank) {
			continue
		}
		if n.mintGate != nil && !n.mintGate(uint32(i), rank) {
			continue
		}
		var over uint64
		if e.known {
			over = e.tok.Epoch
		}
		t := Token{ID: uint32(i), Epoch: over + 1, GiverEpoch: over, Holder: n.id, HolderKey: n.key, Coord: copyCoord(n.coord), HeldSince: now}
		// The silent version stays at hand: should its holder announce
		// that it still holds, it goes back to it and this mint is dropped.
		n.replace(now, e, t, !n.cfg.Guard)
		e.prevHeard = now
		n.take(now, t)
		n.event(EventMinted, t)
		return
	}
}

func (n *Node) coordOK() bool { return validCoord(n.coord) }

// take makes this node the holder of t and announces it at once.
func (n *Node) take(now time.Time, t Token) {
	t.Coord = copyCoord(n.coord)
	n.held = &held{
		tok:         t,
		nextCheck:   now.Add(n.jitter(n.cfg.MoveInterval)),
		lastOffered: t.Epoch,
	}
	e := &n.tokens[t.ID]
	e.tok, e.known, e.lastHeard, e.since = t, true, now, now
	n.setRole(superpeer.Client) // a superpeer once settled
	n.ready.RoleChanged = true
	n.announce(now)
}

func (n *Node) drop(k EventKind, by Token) {
	n.held = nil
	if n.cen != nil {
		n.cen.Withdraw()
	}
	n.setRole(superpeer.Client)
	n.ready.RoleChanged = true
	n.event(k, by)
}

// Step feeds one received message to the node. A message that makes no
// sense is refused with a named error and changes nothing.
func (n *Node) Step(now time.Time, m Message) (Ready, error) {
	n.init(now)
	if n.retired(m.Token) {
		// From a peer that has not heard yet that the count fell below
		// this token (it will with the next count it hears), or the last
		// word of the holder whose count retired it: its count still
		// counts.
		n.hearCount(now, m.Token.Count)
		return n.takeReady(), nil
	}
	if err := n.check(m); err != nil {
		return Ready{}, err
	}
	n.hearCount(now, m.Token.Count)
	if int(m.Token.ID) >= len(n.tokens) {
		// The count this message brought retired its token.
		return n.takeReady(), nil
	}
	switch m.Type {
	case MsgAnnounce:
		n.observe(now, m.Token)
	case MsgMove:
		n.onMove(now, m)
	case MsgMoveAck:
		n.onAck(now, m)
	case MsgMoveRefuse:
		n.onRefuse(now, m)
	case MsgSurvey:
		n.onSurvey(now, m)
	case MsgSurveyReport:
		n.onSurveyReport(now, m)
	}
	return n.takeReady(), nil
}

func (n *Node) check(m Message) error {
	if !validCount(m.Token.Count, n.cfg.maxTokens()) {
		return errInvalidCount
	}
	if c := n.cfg.Capacity; c > 0 && m.Token.Count.Peers > c+1 {
		// A holder serves at most Capacity clients: a report of more is
		// a lie that would inflate the count.
		return fmt.Errorf("%w: %d peers reported, capacity %d", errInvalidCount, m.Token.Count.Peers, c)
	}
	if s := n.limit(m.Token.Count); m.Token.ID >= uint32(s) {
		return fmt.Errorf("%w: %d ≥ %d", errTokenOutOfRange, m.Token.ID, s)
	}
	switch m.Type {
	case MsgAnnounce:
		if m.From != m.Token.Holder {
			return errNotHolder
		}
	case MsgMove:
		if m.To != n.id {
			return errNotForMe
		}
		if m.Token.Holder != n.id || m.Token.HolderKey != n.key || m.Token.Giver != "" && m.Token.Giver != m.From {
			return errBadOffer
		}
		return nil // the offered coordinate is the old holder's; ours replaces it
	case MsgMoveAck:
		if m.To != n.id {
			return errNotForMe
		}
		if m.From != m.Token.Holder {
			return errNotHolder
		}
	case MsgMoveRefuse:
		if m.To != n.id {
			return errNotForMe
		}
		return nil
	case MsgSurvey, MsgSurveyReport:
		if m.To != n.id {
			return errNotForMe
		}
		if err := checkSurvey(m); err != nil {
			return err
		}
		if m.Type == MsgSurveyReport {
			return nil // the surveyed version, matched against our own
		}
		if m.From != m.Token.Holder {
			return errNotHolder
		}
	default:
		return fmt.Errorf("%w: %d", errUnknownType, m.Type)
	}
	if !validCoord(m.Token.Coord) {
		return errInvalidCoord
	}
	if !validDigest(m.Token.Digest) {
		return errInvalidDigest
	}
	return nil
}

// observe learns of a token version, keeps the freshest it can trust per
// ID, and applies the fencing rule to the token this node holds.
//
// Without Config.Guard every fresher version is taken. With it, a fresher
// version replaces the known one at once if it is that version's hand-over
// (Token.handedFrom: only its holder can sign one), or if the known one is
// a mint younger than DeadAfter. Any other fresher version (a mint, a
// hand-over whose steps this node missed, or a forgery) cannot be traced
// to the known version's holder: the holder of the known version never
// takes it (it knows it has not handed its token over, unless an offer of
// its own went unanswered), and other nodes take it but keep the version
// it replaced until that has been silent for DeadAfter. If that version's
// holder announces meanwhile that it has refused the rival (Token.Rival),
// they go back to it (EventReverted), and refuse untraced versions for as
// long as they hear it. So a peer can take a token only from its holder,
// or once its holder has been silent for DeadAfter, as a mint must wait.
func (n *Node) observe(now time.Time, t Token) {
	e := &n.tokens[t.ID]
	if e.hasPrev && now.Sub(e.prevHeard) >= n.cfg.DeadAfter {
		e.hasPrev = false
	}
	h := n.held
	mine := h != nil && h.tok.ID == t.ID
	switch {
	case n.goesBack(now, e, t):
		n.revert(now, e, t)
		return
	case !e.known || t.Beats(e.tok):
		ok, traced := n.admit(now, e, t)
		if !ok {
			n.event(EventUntraced, t)
			if mine {
				h.rival = max(h.rival, t.Epoch)
				if now.Sub(h.lastAnnounce) >= n.cfg.MovingAnnounceInterval {
					n.announce(now)
				}
			}
			return
		}
		if e.known && e.tok.Holder != t.Holder && n.cen != nil {
			// The new holder reports for the token now.
			n.cen.Forget(e.tok.Holder)
		}
		n.replace(now, e, t, traced)
		e.tok, e.known, e.lastHeard = copyToken(t), true, now
		n.hearReport(now, t)
	case e.tok.sameVersion(t) && (t.Seq > e.tok.Seq || t.Seq == 0 && e.tok.Seq == 0):
		// Same version, newer news: position, digest, moves. (Seq 0 on
		// both: a peer that counts no heartbeats, every copy is news.)
		e.lastHeard = now
		e.tok = copyToken(t)
		n.hearReport(now, t)
	}
	if !mine || t.sameVersion(h.tok) {
		return
	}
	if t.Beats(h.tok) {
		kind := EventFenced
		if h.pending != nil && h.pending.offer.sameVersion(t) {
			kind = EventMovedAway // the ack, or the new holder's announcement
		}
		n.drop(kind, t)
		return
	}
	// Someone still holds an older version: tell everyone ours now rather
	// than at the next interval, so the stale holder drops it sooner.
	if now.Sub(h.lastAnnounce) > 0 {
		n.announce(now)
	}
}

// news reports whether observe would do anything on hearing t: take it,
// go back to it, refuse it as untraced, or take it as a later heartbeat.
// The selector verifies signatures only of news.
func (n *Node) news(now time.Time, t Token) bool {
	if int(t.ID) >= len(n.tokens) {
		return false
	}
	e := &n.tokens[t.ID]
	switch {
	case n.goesBack(now, e, t):
		return true
	case !e.known || t.Beats(e.tok):
		return true
	case e.tok.sameVersion(t):
		return t.Seq > e.tok.Seq || t.Seq == 0 && e.tok.Seq == 0
	}
	return false
}

// knows reports whether t's version, with t's heartbeat, is the one this
// node knows of its token.
func (n *Node) knows(t Token) bool {
	if int(t.ID) >= len(n.tokens) {
		return false
	}
	e := n.tokens[t.ID]
	return e.known && e.tok.sameVersion(t) && e.tok.Seq == t.Seq
}

// goesBack reports whether e, which took an untraced version over e.prev,
// should go back to t: prev's holder announcing that it still holds after
// refusing a rival at least as fresh as the first one e took, or prev's
// hand-over (its lineage lives on).
func (n *Node) goesBack(now time.Time, e *tableEntry, t Token) bool {
	if !e.hasPrev || now.Sub(e.prevHeard) >= n.cfg.DeadAfter {
		return false
	}
	return t.sameVersion(e.prev) && t.Seq > e.prev.Seq && t.Rival >= e.untraced || t.handedFrom(e.prev)
}

// admit decides whether t, fresher than e's version (or the first word
// of its token), replaces it (ok), and whether t traces to e's version
// (traced: its hand-over, a rival mint, or a version this node's own
// unanswered offer may have led to). See observe.
func (n *Node) admit(now time.Time, e *tableEntry, t Token) (ok, traced bool) {
	if !e.known || !n.cfg.Guard || t.handedFrom(e.tok) {
		return true, true
	}
	if e.contested && now.Sub(e.lastHeard) < n.cfg.DeadAfter {
		return false, false
	}
	if e.tok.minted() && now.Sub(e.since) < n.cfg.DeadAfter {
		// A mint is a guess that the token is lost. For DeadAfter any
		// fresher version replaces it: a rival mint (the order keeps
		// one), or the token itself, moved on where the minter did not hear.
		return true, true
	}
	if h := n.held; h != nil && h.tok.sameVersion(e.tok) {
		// This node holds e's version: it alone knows it has not handed it
		// over, unless an offer it made is unanswered and t is its taker's
		// own hand-over (heard before the taker's announcement or ack).
		ok := h.unanswered.Giver != "" && t.handedFrom(h.unanswered)
		if p := h.pending; p != nil {
			ok = ok || t.handedFrom(p.offer)
		}
		return ok, true
	}
	return true, false
}

// replace does the bookkeeping of e taking t: an untraced t keeps the
// version it replaces (the first such, with when it was last heard) for
// observe to go back to.
func (n *Node) replace(now time.Time, e *tableEntry, t Token, traced bool) {
	if !traced {
		if e.known && !e.hasPrev {
			e.prev, e.hasPrev, e.prevHeard, e.prevSince, e.untraced = copyToken(e.tok), true, e.lastHeard, e.since, t.Epoch
		}
		// The entry gave up the version it went back to: its holder fell
		// silent. A hand-over by that holder keeps the entry contested.
		e.contested = false
	}
	e.since = now
}

// revert makes e go back to t (goesBack); this node drops its own token
// if it held the rival's.
func (n *Node) revert(now time.Time, e *tableEntry, t Token) {
	if n.cen != nil && e.tok.Holder != t.Holder {
		n.cen.Forget(e.tok.Holder)
	}
	since := now
	if t.sameVersion(e.prev) {
		since = e.prevSince // a mint is as young as it was
	}
	e.tok, e.lastHeard, e.since = copyToken(t), now, since
	e.hasPrev, e.contested = false, true
	n.hearReport(now, t)
	n.event(EventReverted, t)
	if h := n.held; h != nil && h.tok.ID == t.ID {
		n.drop(EventFenced, t)
	}
}

func (n *Node) onMove(now time.Time, m Message) {
	t := m.Token
	if h := n.held; h != nil {
		if h.tok.sameVersion(t) {
			// A duplicate of the offer we took: the first ack may be lost.
			n.send(Message{Type: MsgMoveAck, To: m.From, Token: h.tok})
			return
		}
		n.send(Message{Type: MsgMoveRefuse, To: m.From, Token: t, Reason: refuseHolding})
		return
	}
	e := &n.tokens[t.ID]
	back := n.goesBack(now, e, t)
	if back {
		// The hand-over of the version this node gave up for an untraced
		// one: that lineage lives.
		n.revert(now, e, t)
	}
	if e.known && !t.Beats(e.tok) && !back {
		n.send(Message{Type: MsgMoveRefuse, To: m.From, Token: t, Reason: refuseStale})
		return
	}
	ok, traced := true, true
	if !back {
		ok, traced = n.admit(now, e, t)
	}
	if !ok {
		// The sender does not hold what this node knows of the token, and
		// the version's holder lives: a stale holder, or a forger.
		n.event(EventUntraced, t)
		n.send(Message{Type: MsgMoveRefuse, To: m.From, Token: t, Reason: refuseStale})
		return
	}
	if !n.coordOK() {
		// Without a coordinate this peer cannot carry the token's position;
		// it would not have been a candidate had the sender known.
		n.send(Message{Type: MsgMoveRefuse, To: m.From, Token: t, Reason: refuseStale})
		return
	}
	t.HeldSince = now
	t.Digest = nil // the old holder's clients are not ours
	n.replace(now, e, t, traced)
	n.take(now, t)
	n.event(EventAccepted, n.held.tok)
	if t.Surveyed {
		// A settled holder measured this place better for its clients:
		// the token stays settled, and its clients need not wait.
		n.settle(now)
	}
	n.send(Message{Type: MsgMoveAck, To: m.From, Token: n.held.tok})
}

func (n *Node) onAck(now time.Time, m Message) {
	// The ack is a version held by its sender, like an announcement; if it
	// is our pending offer, observe drops our copy.
	n.observe(now, m.Token)
}

func (n *Node) onRefuse(now time.Time, m Message) {
	h := n.held
	if h == nil || h.pending == nil || !h.pending.offer.sameVersion(m.Token) || m.From != m.Token.Holder {
		return
	}
	n.event(EventMoveRefused, h.pending.offer)
	h.pending = nil
	n.refused[m.From] = now.Add(4 * n.cfg.MoveInterval)
	h.nextCheck = now.Add(n.jitter(n.cfg.MoveInterval))
}

// maybeMove scores the candidates and offers the token to the best one if
// the gain is worth it.
func (n *Node) maybeMove(now time.Time) {
	h := n.held
	if !n.coordOK() {
		return
	}
	dims := len(n.coord.Vec)
	usable := func(c vivaldi.Coord) bool { return validCoord(c) && len(c.Vec) == dims }
	// A fresher token whose holder this node measured at its own site
	// sits, whatever the coordinates say, where this node is: so it counts
	// in the field, and this token moves for any gain worth MinGain.
	shared := false
	var others []vivaldi.Coord
	otherAt := map[int]int{} // token ID → index in others, where the digest's measured RTTs apply
	for i, e := range n.tokens {
		if uint32(i) == h.tok.ID || !e.known || now.Sub(e.lastHeard) >= n.cfg.DeadAfter || !usable(e.tok.Coord) {
			continue
		}
		if n.sharesSite(now, e.tok, h.tok) {
			shared = true
			others = append(others, n.coord)
			continue
		}
		otherAt[i] = len(others)
		others = append(others, e.tok.Coord)
	}
	holders := n.holders(now)
	var clients []vivaldi.Coord
	var weights []float64
	var cands []Peer
	// Per client: the index in others of the token it is attached to and
	// the RTT its holder measured to it (a digest point's), -1 and 0 where
	// unknown.
	var holderOf []int
	var measured []float64
	addClient := func(c vivaldi.Coord, w float64, holder int, rtt float64) {
		clients, weights = append(clients, c), append(weights, w)
		holderOf, measured = append(holderOf, holder), append(measured, rtt)
	}
	if n.cfg.Model == Attract {
		addClient(n.coord, 1, -1, 0)
	}
	at := map[string]int{n.id: 0} // client index of a peer already counted
	misfit, trusted := n.misfits(now)
	for _, p := range n.peers {
		if _, dup := at[p.ID]; dup || !usable(p.Coord) || misfit[p.ID] {
			continue
		}
		if n.cfg.Model == Attract {
			at[p.ID] = len(clients)
			addClient(p.Coord, 1, -1, 0)
		}
		if !holders[p.ID] && n.refused[p.ID].IsZero() {
			cands = append(cands, p)
		}
	}
	// The other tokens' digests: their clients in outline, as clients of
	// the potential and as places to move to. A point this node already
	// counts as a peer gets the rest of its weight added there.
	for i, e := range n.tokens {
		if n.cfg.Model != Attract || uint32(i) == h.tok.ID || !e.known || now.Sub(e.lastHeard) >= n.cfg.DeadAfter {
			continue
		}
		for _, sm := range e.tok.Digest {
			if !usable(sm.Coord) {
				continue
			}
			if j, dup := at[sm.ID]; dup {
				weights[j] += max(sm.Weight-1, 0)
				continue
			}
			at[sm.ID] = len(clients)
			k, ok := otherAt[i]
			if !ok {
				k = -1
			}
			addClient(sm.Coord, sm.Weight, k, sm.RTT)
			if !holders[sm.ID] && n.refused[sm.ID].IsZero() {
				cands = append(cands, Peer{ID: sm.ID, Key: sm.Key, Coord: sm.Coord})
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	if k := n.cfg.MaxCandidates; k > 0 && len(cands) > k {
		n.rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		cands = cands[:k]
	}
	f := newField(&n.cfg, others, clients)
	if n.cfg.Model == Attract {
		f.setWeights(weights)
		f.setMeasured(holderOf, measured)
	}
	if !shared && n.cfg.ForceThreshold > 0 && norm(f.force(n.coord)) < n.cfg.ForceThreshold {
		return
	}
	here := f.potential(n.coord)
	need := n.minGain(h)
	if shared {
		need = n.cfg.MinGain
	}
	// The candidates that would gain enough, best first; with the
	// coordinate check the first whose coordinate fits its measured RTT,
	// after measuring it if need be.
	type ranked struct {
		i int
		p float64
	}
	var good []ranked
	scale := need * n.gainScale(f, here)
	for i, c := range cands {
		if p := f.potential(c.Coord); here-p > 0 && here-p >= scale {
			good = append(good, ranked{i, p})
		}
	}
	slices.SortStableFunc(good, func(a, b ranked) int { return cmp.Compare(a.p, b.p) })
	best := -1
	for _, g := range good {
		if !trusted {
			best = g.i
			break
		}
		fit, wait := n.checkCandidate(now, cands[g.i])
		if wait {
			return
		}
		if fit {
			best = g.i
			break
		}
	}
	if best < 0 {
		return
	}
	kind := EventKind(0)
	if shared {
		kind = EventSiteShared
	}
	n.offer(now, cands[best], kind)
}

// offer offers the held token to peer to: a new version with to as holder
// and a higher epoch, held here until the ack. why, if not zero, is the
// event that led to it (EventSiteShared, EventSurveyMoved); a survey's
// offer is marked Surveyed, and the new holder takes it settled.
func (n *Node) offer(now time.Time, to Peer, why EventKind) {
	h := n.held
	epoch := max(h.tok.Epoch, h.lastOffered) + 1
	h.lastOffered = epoch
	offer := Token{ID: h.tok.ID, Epoch: epoch, Holder: to.ID, HolderKey: to.Key, Coord: copyCoord(to.Coord),
		Moves: h.tok.Moves + 1, Surveyed: why == EventSurveyMoved, Giver: n.id, GiverEpoch: h.tok.Epoch}
	h.pending = &pendingMove{offer: offer, deadline: now.Add(n.cfg.MoveTimeout)}
	if why != 0 {
		n.event(why, offer)
	}
	n.event(EventMoveOffered, offer)
	n.send(Message{Type: MsgMove, To: to.ID, Token: offer})
}

// minGain is the relative gain the next move of the held token needs: the
// base threshold, doubled for every CoolingMoves moves on the token's count
// (one more per move, one less per CoolingRest at rest). Holders judge candidates from their own views
// (their own samples of peers, their own slightly different coordinates), so
// there is no single potential they all descend; cooling bounds how long
// they can pass a token around on disagreements. With the gain scale below
// no move can pass once the factor exceeds Tokens, so an unsettled token
// moves at most CoolingMoves·log2(Tokens/MinGain) times in a row, and after
// that once per CoolingRest.
func (n *Node) minGain(h *held) float64 {
	g := n.cfg.MinGain
	if h.settled {
		g = n.cfg.SettledMinGain
	}
	return g * n.cooling(h)
}

// cooling is the factor a move of the held token needs on top of its base
// gain: 2 to the power of the token's count over CoolingMoves (1 with
// cooling off or no moves counted).
func (n *Node) cooling(h *held) float64 {
	if n.cfg.CoolingMoves <= 0 || h.tok.Moves == 0 {
		return 1
	}
	return math.Exp2(float64(h.tok.Moves) / float64(n.cfg.CoolingMoves))
}

// gainScale is what MinGain is relative to: the token's own share of the
// potential, but at least an even split of it among the tokens, so that a
// token that serves nobody yet (share 0) still needs a real gain to move.
func (n *Node) gainScale(f *field, here float64) float64 {
	return max(abs(f.share(n.coord)), abs(here)/float64(len(n.tokens)))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// maxMedianCandidates bounds the clients kmedianPicks considers as picks.
const maxMedianCandidates = 256

// kmedianPicks chooses min(k, len(cs)) of the clients by the greedy
// k-median over their coordinates: each pick is the client that lowers the
// clients' total distance to their nearest pick most (ties to the lower
// index). A client's distance to itself is 0 (with heights DistanceTo says
// otherwise). Gains only shrink as picks are added, so they are
// re-evaluated lazily (Minoux): O(len(cs)·candidates) for the first pick
// and usually a few re-evaluations per pick after. With more than
// maxMedianCandidates clients the picks are drawn from the
// maxMedianCandidates clients whose IDs hash lowest (scored over all):
// a holder of 1500 clients (10^5 peers, 64 tokens) spent most of the
// simulator's time on its digests.
func kmedianPicks(cs []Peer, k int) []int {
	if len(cs) == 0 {
		return nil
	}
	m := len(cs)
	d := func(i, j int) float64 {
		if i == j {
			return 0
		}
		return cs[i].Coord.DistanceTo(cs[j].Coord)
	}
	// best[i] is client i's distance to its nearest pick; before the first
	// pick a constant above any distance (coordinates are in seconds, and
	// Vivaldi refuses RTTs over 10 s), so the first pick is the 1-median.
	const far = 1e3
	best := make([]float64, m)
	for i := range best {
		best[i] = far
	}
	gain := func(j int) float64 {
		var g float64
		for i := 0; i < m; i++ {
			if dij := d(i, j); dij < best[i] {
				g += best[i] - dij
			}
		}
		return g
	}
	type entry struct {
		j     int
		gain  float64
		round int // picks made when gain was computed
	}
	cand := make([]int, m)
	for j := range cand {
		cand[j] = j
	}
	if m > maxMedianCandidates {
		// A sample that does not depend on the clients' order: the
		// clients whose IDs hash lowest.
		h := make([]uint64, m)
		for j := range cs {
			f := fnv.New64a()
			f.Write([]byte(cs[j].ID))
			h[j] = f.Sum64()
		}
		sort.Slice(cand, func(a, b int) bool { return h[cand[a]] < h[cand[b]] })
		cand = cand[:maxMedianCandidates]
		sort.Ints(cand)
	}
	es := make([]entry, 0, len(cand))
	for _, j := range cand {
		es = append(es, entry{j, gain(j), 0})
	}
	picks := make([]int, 0, min(k, len(es)))
	for len(picks) < cap(picks) {
		top := 0
		for i := range es {
			if es[i].gain > es[top].gain || (es[i].gain == es[top].gain && es[i].j < es[top].j) {
				top = i
			}
		}
		if es[top].round != len(picks) {
			es[top].gain, es[top].round = gain(es[top].j), len(picks)
			continue
		}
		j := es[top].j
		es = append(es[:top], es[top+1:]...)
		picks = append(picks, j)
		for i := 0; i < m; i++ {
			best[i] = min(best[i], d(i, j))
		}
	}
	return picks
}
