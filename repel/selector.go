package repel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	logging "github.com/ipfs/go-log/v2"
	kb "github.com/libp2p/go-libp2p-kbucket"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/internal/counters"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

var log = logging.Logger("repel")

// selectorOptions are the selector's settings: those the Options set and
// the timers only the package's tests change.
type selectorOptions struct {
	Config        Config
	Attach        []superpeer.Option
	Vivaldi       *vivaldi.Service
	Seed          uint64
	Dissemination Dissemination
	Registerer    prometheus.Registerer
	Switch        float64 // WithSwitch
	Probe         int     // WithProbe
	Explore       int     // WithExplore
	ExploreFirst  int     // WithExploreFirst

	// Renew is how often a client renews its attachment and reconsiders
	// which holder is nearest (default a third of the attach TTL).
	Renew time.Duration
	// Tick is how often the model's timers are driven (default a quarter
	// of the shortest of MoveInterval, MovingAnnounceInterval and
	// MoveTimeout).
	Tick time.Duration
	// View is how often the node's own coordinate and its peers are handed
	// to the model, and the readers' snapshot of the tokens refreshed
	// without a change (default MoveInterval).
	View time.Duration
	// Neighbours is how many of the Vivaldi peers nearest by coordinate the
	// model is told of (default 32): its move candidates and, for Attract,
	// its sample of clients beside the attached ones and the digests.
	Neighbours int
	// MinReattach spaces the client's reactions to token changes (default
	// MoveInterval).
	MinReattach time.Duration
	// MintLookup is how many peers a lookup of a silent token's name asks
	// for (default 3): the model mints when this peer ranks first among the
	// live peers nearest the name, the next ranks later.
	MintLookup int
	// GossipPush is how many requests carry a version a peer has just
	// learned, beside the replies that carry whatever a request lacks
	// (Piggyback; default 4).
	GossipPush int
	// GossipEvery is how often a holder's heartbeat (a new Seq of the same
	// version) goes out on the piggyback (default the larger of
	// AnnounceInterval and a quarter of DeadAfter): every peer checks the
	// signature of every one, and liveness needs only a few per T_dead. New
	// versions go out at once, and every announcement goes to the other
	// holders directly.
	GossipEvery time.Duration
	// Rate and Burst are the per-peer limit of the move, survey and
	// announce streams (WithRateLimit; rateSet: given, else the default
	// from the Config's intervals).
	Rate    float64
	Burst   int
	rateSet bool
}

// ErrOptions is wrapped by the error of NewSelector given an invalid
// option.
var ErrOptions = errors.New("repel: invalid selector options")

func (o *selectorOptions) defaults() error {
	if o.Config == (Config{}) {
		o.Config = DefaultConfig()
	}
	c := o.Config
	if o.Tick == 0 {
		o.Tick = max(min(c.MoveInterval, c.MovingAnnounceInterval, c.MoveTimeout)/4, 10*time.Millisecond)
	}
	if o.View == 0 {
		o.View = max(c.MoveInterval, o.Tick)
	}
	if o.Neighbours == 0 {
		o.Neighbours = 32
	}
	if o.MinReattach == 0 {
		o.MinReattach = c.MoveInterval
	}
	if o.Switch == 0 {
		o.Switch = 1.1
	}
	if o.MintLookup == 0 {
		o.MintLookup = 3
	}
	if o.Probe == 0 {
		o.Probe = 3
	}
	if o.Explore == 0 {
		o.Explore = 1
	}
	if o.GossipPush == 0 {
		o.GossipPush = 4
	}
	if o.GossipEvery == 0 {
		o.GossipEvery = max(c.AnnounceInterval, c.DeadAfter/4)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if !o.rateSet {
		o.Rate, o.Burst = defaultRate(c)
	}
	switch {
	case o.Tick < 0 || o.View < 0 || o.MinReattach < 0 || o.Renew < 0:
		return fmt.Errorf("%w: negative Tick, View, Renew or MinReattach", ErrOptions)
	case o.Neighbours < 0 || o.MintLookup < 1:
		return fmt.Errorf("%w: Neighbours %d must be ≥ 0 and MintLookup %d ≥ 1", ErrOptions, o.Neighbours, o.MintLookup)
	case o.Switch < 1:
		return fmt.Errorf("%w: Switch %v must be ≥ 1", ErrOptions, o.Switch)
	case o.GossipEvery < 0:
		return fmt.Errorf("%w: GossipEvery %v must be ≥ 0", ErrOptions, o.GossipEvery)
	case o.GossipPush < 0:
		return fmt.Errorf("%w: GossipPush %d must be ≥ 0", ErrOptions, o.GossipPush)
	case o.Dissemination != Piggyback && o.Dissemination != GossipSub:
		return fmt.Errorf("%w: unknown Dissemination %v", ErrOptions, o.Dissemination)
	}
	return nil
}

// input is one thing for the loop: a message for the model (with, for a
// move offer, where its answer goes) or the result of a token-name lookup.
type input struct {
	msg     Message
	reply   chan *Message
	closest map[uint32][]peer.ID
	probe   *probeAnswer
	gossip  []signedToken // from a piggyback, or one direct announcement
	direct  peer.ID       // who sent gossip directly (the announce protocol), or ""
}

// probeAnswer is a measured RTT the model asked for (Ready.Probes).
type probeAnswer struct {
	id  peer.ID
	rtt time.Duration
	ok  bool
}

// snapshot is the loop's state as other goroutines may read it.
type snapshot struct {
	role     superpeer.Role
	held     Token
	holding  bool
	offer    Token // the version offered in a move awaiting its answer
	offering bool
	surveyed bool // a survey kept the held token where it is
	live     []Token
	count    Count
}

// Selector runs the repel method on one peer (superpeer.Selector): one
// goroutine owns the model Node, driving its timers, feeding it gossip,
// move frames, its Vivaldi coordinate and its peers, and turning its Ready
// into announcements (WithDissemination) and move streams. A holder whose token settled
// is a superpeer. A client attaches with the attach protocol to the live
// holder of lowest predicted RTT that accepts it (holders accept clients
// before they settle, so tokens see where their clients are), renews every
// third of the attach TTL, and re-attaches when its holder loses the token.
type Selector struct {
	node   *dht.Node
	viv    *vivaldi.Service
	ownViv bool // made by NewSelector, closed by Close
	opts   selectorOptions
	ids    wireIDs // under the node's protocol prefix
	attach *superpeer.Attach
	note   superpeer.Notifier
	topic  *pubsub.Topic
	sub    *pubsub.Subscription
	model  *Node // owned by loop

	// Piggyback dissemination: the signed versions spread on Vivaldi
	// exchanges, this peer's key to sign its own, and the last digest a
	// holder sent of each token (owned by loop).
	table    *gossipTable
	key      crypto.PrivKey
	digests  []Token
	gossiped Token // the last own announcement put on the piggyback (owned by loop)
	// sigs are the versions whose signatures verified lately, certs the
	// hand-over certificates (owned by loop).
	sigs, certs verifiedSigs

	rtNear   [][]peer.ID // per token, the routing table's peers nearest its name (owned by loop)
	rtNearAt time.Time   // when setView last looked rtNear up (owned by loop)
	heard    []time.Time // per token, when it was last heard of (owned by loop)
	known    []bool      // per token, whether it was heard of since the start (owned by loop)
	looked   []time.Time // per token, when its name was last looked up (owned by loop)
	answered []time.Time // per token, when a lookup of its name last answered (owned by loop)

	lastSnap time.Time // owned by loop: when the snapshot was last taken

	inbox chan *input // pointers: a buffer of inputs by value was 100 KB a peer
	kick  chan struct{}
	pub   chan []byte

	// renewedAt is when the request the current holder last accepted
	// was sent (the attacher goroutine's alone).
	renewedAt time.Time

	mu          sync.Mutex
	snap        snapshot
	attached    peer.ID
	unreachable map[peer.ID]time.Time // move targets that could not be reached, until when
	start       time.Time

	drops counters.Set
	stats counters.Set
	// limit is the per-peer bucket of the move, survey and announce
	// streams (WithRateLimit; nil: none).
	limit *limits.PerPeer

	stopMetrics func()

	ctx    context.Context // the running selector's, set by Start
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Counter names of Selector.Stats.
const (
	statAnnounceSent   = "announce_sent"
	statAnnounceBytes  = "announce_bytes"
	statAnnounceRecv   = "announce_received"
	statMoveSent       = "move_frames_sent"
	statMoveBytes      = "move_bytes"
	statLookups        = "token_lookups"
	statLookupFails    = "token_lookup_failures" // lookups that ended in an error: the peer ranks on its routing table alone
	statPublishDrop    = "publish_queue_full"
	statMoveLost       = "move_streams_lost" // the other side reset or closed before a frame
	statHolderProbes   = "holder_probes"     // Vivaldi exchanges the model asked for: a holder's with other holders and its clients (Config.ProbeTTL), a survey candidate's with the peers surveyed
	statProbesFailed   = "holder_probes_failed"
	statExplored       = "client_explored" // Vivaldi exchanges a client made with holders it had not measured (AttachConfig.Explore)
	statDropped        = "client_dropped"  // notices from this client's holder that it took another client in its place
	statGossipRetired  = "gossip_retired"  // versions of tokens a smaller count retired, from peers that had not heard of it
	statStalledRetries = "stalled_retries" // exchanges asked again because this process stalled in them (vivaldi.ErrStalled)
	// Piggyback dissemination: piggybacks sent on the Vivaldi exchanges
	// (both directions) and their bytes, versions received that were
	// news, signatures checked, and piggybacks the loop was too busy to
	// take.
	statGossipFrames   = "gossip_piggybacks"
	statGossipBytes    = "gossip_piggyback_bytes"
	statGossipNews     = "gossip_news"
	statGossipBusy     = "gossip_queue_full"
	statAnnounceLost   = "announce_streams_lost"
	statGossipVerified = "gossip_signatures_checked"
	statGossipSigKnown = "gossip_signatures_known" // versions whose signatures had verified lately (verifiedSigs): not checked again
)

// NewSelector makes a repel selector on node. Without WithVivaldi it makes
// a Vivaldi service of its own (sampling the node's routing table every
// 2 s; Close closes it); with WithDissemination(GossipSub)
// the node must have a pubsub router, and NewSelector registers the topic's
// validator. Start registers the move, survey and announce protocols and
// runs it. Every protocol ID and the topic derive from the node's protocol
// prefix (dht.Node.ProtocolPrefix), which a given Vivaldi service must
// share.
func NewSelector(node *dht.Node, opts ...Option) (*Selector, error) {
	if node == nil {
		return nil, errors.New("repel: NewSelector needs a dht.Node")
	}
	var o selectorOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	viv := o.Vivaldi
	ownViv := viv == nil
	if ownViv {
		var err error
		if viv, err = ownVivaldi(node, o); err != nil {
			return nil, err
		}
	}
	s, err := newSelector(node, viv, o)
	if err != nil {
		if ownViv {
			viv.Close()
		}
		return nil, err
	}
	s.ownViv = ownViv
	return s, nil
}

// ownVivaldi is the Vivaldi service a selector makes when given none: it
// samples the node's routing table, under the node's protocol prefix, every
// defaultVivaldiInterval, and reports its metrics where the selector does.
func ownVivaldi(node *dht.Node, opts selectorOptions) (*vivaldi.Service, error) {
	vo := []vivaldi.Option{
		vivaldi.WithProtocolPrefix(node.ProtocolPrefix()),
		vivaldi.WithInterval(defaultVivaldiInterval),
		vivaldi.WithPeerSource(func() []peer.ID { return node.RoutingTable().ListPeers() }),
		vivaldi.WithSeed(int64(opts.Seed)),
	}
	if opts.Registerer != nil {
		vo = append(vo, vivaldi.WithRegisterer(opts.Registerer))
	}
	return vivaldi.NewService(node.Host(), vo...)
}

// defaultVivaldiInterval is how often the Vivaldi service a selector makes
// for itself (NewSelector with no service) samples a peer.
const defaultVivaldiInterval = 2 * time.Second

func newSelector(node *dht.Node, viv *vivaldi.Service, opts selectorOptions) (*Selector, error) {
	prefix := node.ProtocolPrefix()
	if viv.ProtocolPrefix() != prefix {
		return nil, fmt.Errorf("repel: the Vivaldi service's protocol prefix %q is not the node's %q (vivaldi.WithProtocolPrefix)", viv.ProtocolPrefix(), prefix)
	}
	ps := node.PubSub()
	if ps == nil && opts.Dissemination == GossipSub {
		return nil, errors.New("repel: the dht.Node has no pubsub router (dht.WithGossipSub or dht.WithPubSub option)")
	}
	// The attach protocol reports where the selector does unless told
	// otherwise, and runs under the node's prefix whatever it is told.
	attOpts := []superpeer.Option{superpeer.WithRegisterer(opts.Registerer)}
	if f := opts.Config.Fraction; f > 0 && opts.Config.Capacity == 0 {
		// Twice the mean load, as the prefix method's WithFraction; the
		// application's own WithCapacity (applied after) wins.
		attOpts = append(attOpts, superpeer.WithCapacity(2*int(math.Ceil(1/f))))
	}
	attOpts = append(attOpts, opts.Attach...)
	att, err := superpeer.NewAttach(node.Host(), append(attOpts, superpeer.WithProtocolPrefix(prefix))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if opts.Config.Capacity == 0 {
		opts.Config.Capacity = att.Capacity()
	}
	self := node.ID()
	model, err := NewNode(string(self), node.Key(), opts.Config, rand.New(rand.NewPCG(opts.Seed, uint64(len(self)))))
	if err != nil {
		att.Close()
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if opts.Renew == 0 {
		opts.Renew = att.TTL() / 3
	}
	if att.TTL() < 2*opts.View {
		// A client renews at most once a View: its attachment must
		// outlive one lost renewal.
		att.Close()
		return nil, fmt.Errorf("%w: attach TTL %v is under twice the View %v (a client renews at most once a View)", ErrOptions, att.TTL(), opts.View)
	}
	s := &Selector{
		node: node, viv: viv, opts: opts, ids: wireIDsUnder(prefix), attach: att, model: model,
		inbox:       make(chan *input, 256),
		kick:        make(chan struct{}, 1),
		pub:         make(chan []byte, 1),
		unreachable: map[peer.ID]time.Time{},
		rtNear:      make([][]peer.ID, opts.Config.Tokens),
		heard:       make([]time.Time, opts.Config.Tokens),
		known:       make([]bool, opts.Config.Tokens),
		looked:      make([]time.Time, opts.Config.Tokens),
		answered:    make([]time.Time, opts.Config.Tokens),
		limit:       limits.NewPerPeer(opts.Rate, opts.Burst, 0),
	}
	s.sigs.Limit = verifiedSigsFor(opts.Config.Tokens)
	s.certs.Limit = s.sigs.Limit
	s.snap.count = model.Count()
	model.setMintGate(s.mintGate)
	att.SetRole(s.attachRole)
	att.ReportRole(s.Role)
	att.OnDropped(s.dropped)
	if s.stopMetrics, err = counters.Register(opts.Registerer, metricFamilies, s.report); err != nil {
		att.Close()
		return nil, fmt.Errorf("repel: metrics: %w", err)
	}
	// The key signs this peer's hand-overs, and with Piggyback its
	// announcements.
	s.key = node.Host().Peerstore().PrivKey(self)
	if s.key == nil {
		s.stopMetrics()
		att.Close()
		return nil, errors.New("repel: the host's peerstore has no private key to sign hand-overs and announcements with")
	}
	if opts.Dissemination == Piggyback {
		s.table = newGossipTable(opts.Config.Tokens, opts.GossipPush)
		s.digests = make([]Token, opts.Config.Tokens)
		return s, nil
	}
	if err := ps.RegisterTopicValidator(s.ids.topic, announceValidator(opts.Config, node.Host().Peerstore().PubKey, func(r string) { s.drops.Add(r, 1) })); err != nil {
		s.stopMetrics()
		att.Close()
		return nil, fmt.Errorf("repel: topic validator: %w", err)
	}
	if s.topic, err = ps.Join(s.ids.topic); err != nil {
		_ = ps.UnregisterTopicValidator(s.ids.topic)
		s.stopMetrics()
		att.Close()
		return nil, fmt.Errorf("repel: join %s: %w", s.ids.topic, err)
	}
	return s, nil
}

// Attach is the peer's attach protocol (its clients, as a holder).
func (s *Selector) Attach() *superpeer.Attach { return s.attach }

// Vivaldi is the coordinate service the selector reads.
func (s *Selector) Vivaldi() *vivaldi.Service { return s.viv }

// Role is the current role.
func (s *Selector) Role() superpeer.Role { r, _ := s.note.State(); return r }

// Superpeer is who serves this peer: itself when its token settled, the
// holder that accepted it as a client, or empty.
func (s *Selector) Superpeer() peer.ID { _, sp := s.note.State(); return sp }

// Subscribe delivers role and superpeer changes.
func (s *Selector) Subscribe() (<-chan superpeer.Change, func()) { return s.note.Subscribe() }

// Held is the token version this peer holds, if any.
func (s *Selector) Held() (Token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyToken(s.snap.held), s.snap.holding
}

// Offer is the token version this holder has offered in a move (Holder
// the peer it offered it to) and awaits the answer to: until the answer the
// offered peer may hold the token too.
func (s *Selector) Offer() (Token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyToken(s.snap.offer), s.snap.offering
}

// Surveyed reports whether this peer holds a token whose place a survey
// has measured and kept (Config.SurveyInterval).
func (s *Selector) Surveyed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.holding && s.snap.surveyed
}

// LiveTokens are the token versions this peer has heard of lately.
func (s *Selector) LiveTokens() []Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Token, len(s.snap.live))
	for i, t := range s.snap.live {
		out[i] = copyToken(t)
	}
	return out
}

// Drops counts refused announcements, gossip and move frames by reason:
// "decode", "bad-holder", "not-holder", "out-of-range", "bad-coord",
// "bad-digest", "bad-type", "write-error", "step", "bad-survey",
// "bad-gossip", "bad-signature", "rate" (a move, survey or announce
// stream past its peer's rate, WithRateLimit).
func (s *Selector) Drops() map[string]uint64 { return s.drops.Snapshot() }

// Stats counts traffic — "announce_sent", "announce_bytes",
// "move_frames_sent", "move_bytes", "survey_frames_sent",
// "survey_frames_received", "survey_bytes", "holder_probes",
// "gossip_piggybacks", "gossip_piggyback_bytes" and received, lost and
// queue-full counts; the lookups of silent tokens' names,
// "token_lookups", and those that failed, "token_lookup_failures" — and
// the model's events by name (minted, accepted, moved-away, fenced,
// settled, ...).
func (s *Selector) Stats() map[string]uint64 { return s.stats.Snapshot() }

// Start runs the selector until Close or ctx ends.
func (s *Selector) Start(ctx context.Context) error {
	if s.cancel != nil {
		return errors.New("repel: selector already started")
	}
	if s.topic != nil {
		sub, err := s.topic.Subscribe()
		if err != nil {
			return fmt.Errorf("repel: subscribe %s: %w", s.ids.topic, err)
		}
		s.sub = sub
	} else if err := s.viv.SetPiggyback(piggyback{s}); err != nil {
		return err
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	ctx = s.ctx
	s.start = time.Now()
	s.node.Host().SetStreamHandler(s.ids.move, s.handleMove)
	s.node.Host().SetStreamHandler(s.ids.survey, s.handleSurvey)
	if s.table != nil {
		s.node.Host().SetStreamHandler(s.ids.announce, s.handleAnnounce)
	}
	s.note.Set(superpeer.Client, "", "started", s.start)
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.loop(ctx) }()
	go func() { defer s.wg.Done(); s.attacher(ctx) }()
	if s.sub != nil {
		s.wg.Add(2)
		go func() { defer s.wg.Done(); s.receive(ctx) }()
		go func() { defer s.wg.Done(); s.publish(ctx) }()
	}
	return nil
}

// Close stops the selector and its protocols.
func (s *Selector) Close() error {
	s.once.Do(func() {
		s.node.Host().RemoveStreamHandler(s.ids.move)
		s.node.Host().RemoveStreamHandler(s.ids.survey)
		if s.table != nil {
			s.node.Host().RemoveStreamHandler(s.ids.announce)
			if s.cancel != nil {
				_ = s.viv.SetPiggyback(nil)
			}
		}
		if s.cancel != nil {
			s.cancel()
		}
		if s.sub != nil {
			s.sub.Cancel()
		}
		s.wg.Wait()
		if s.topic != nil {
			_ = s.topic.Close()
			if ps := s.node.PubSub(); ps != nil {
				_ = ps.UnregisterTopicValidator(s.ids.topic)
			}
		}
		s.stopMetrics()
		s.attach.Close()
		if s.ownViv {
			s.viv.Close()
		}
	})
	return nil
}

// post hands an input to the loop, unless ctx ends first.
func (s *Selector) post(ctx context.Context, in input) bool {
	select {
	case s.inbox <- &in:
		return true
	case <-ctx.Done():
		return false
	}
}

// loop owns the model.
func (s *Selector) loop(ctx context.Context) {
	tick := time.NewTicker(s.opts.Tick)
	defer tick.Stop()
	var lastView time.Time
	closest := make(map[uint32][]peer.ID, s.opts.Config.Tokens) // live peers nearest each silent token's name
	for i := range s.heard {
		s.heard[i] = s.start
	}
	lookupBusy := false
	var lastMintCheck time.Time
	s.setView(time.Now(), closest)
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-tick.C:
			if now.Sub(lastView) >= s.opts.View {
				lastView = now
				s.setView(now, closest)
			}
			s.apply(now, s.model.Tick(now), nil)
		case in := <-s.inbox:
			now = time.Now()
			if in.probe != nil {
				s.model.Measured(now, string(in.probe.id), in.probe.rtt, in.probe.ok)
				continue
			}
			if in.gossip != nil {
				for _, g := range s.takeGossip(now, in.gossip, in.direct) {
					t := g.tok
					s.step(now, Message{Type: MsgAnnounce, From: t.Holder, Token: t}, nil)
					s.keepGossip(g, in.direct != "")
					s.hear(t.ID, now)
				}
				continue
			}
			if in.closest != nil {
				lookupBusy = false
				for id, ps := range in.closest {
					closest[id] = ps
					if int(id) < len(s.answered) {
						s.answered[id] = now
					}
				}
				s.setView(now, closest)
				continue
			}
			s.step(now, in.msg, in.reply)
			if in.msg.Type == MsgAnnounce {
				s.hear(in.msg.Token.ID, now)
			}
		}
		for id := range closest {
			if int(id) >= len(s.heard) {
				delete(closest, id) // retired
			}
		}
		// Tokens silent for most of the wait before a mint (lookupAfter):
		// if this peer is nearer their names than every peer its routing
		// table knows that holds no token, it may be the one to mint them
		// again; a lookup of the live peers nearest the name tells the
		// model for sure, again every quarter of T_dead while the token
		// stays silent, and the model mints first on nothing else
		// (mintGate). Not sooner: news of a token reaches some peers
		// seconds late, and a lookup from each of them for every late
		// heartbeat kept hundreds in flight (experiments/README.md, "…
		// what its misses are"). Peers with a nearer routing-table entry
		// know already that they are not first (setView passes those on).
		if t, ok := s.model.Held(); ok {
			s.hear(t.ID, now)
			delete(closest, t.ID)
		}
		// The routing-table check runs at most once a Tick, not after
		// every message: a peer hears several gossip messages a second,
		// and at 490 in-process peers the check after each was 5% of the
		// machine.
		if lookupBusy || now.Sub(lastMintCheck) < s.opts.Tick {
			continue
		}
		lastMintCheck = now
		var due []uint32
		quarter := s.opts.Config.DeadAfter / 4
		var holders map[string]bool // read once a token is silent long enough
		for i := range s.heard {
			if now.Sub(s.heard[i]) < s.lookupAfter(i) || now.Sub(s.looked[i]) < quarter {
				continue
			}
			if holders == nil {
				holders = s.model.holders(now)
			}
			if s.mayMint(uint32(i), holders) {
				due = append(due, uint32(i))
				s.looked[i] = now
			}
		}
		if len(due) > 0 {
			lookupBusy = true
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.lookupNames(ctx, due) }()
		}
	}
}

// step feeds m to the model and carries out its Ready; reply, if not nil,
// takes the answer to a move offer.
func (s *Selector) step(now time.Time, m Message, reply chan *Message) {
	r, err := s.model.Step(now, m)
	if err != nil {
		s.drops.Add(dropStep, 1)
		s.stats.Add("step_error_"+dropReason(err), 1)
		log.Debugw("repel: message refused", "from", peer.ID(m.From), "type", m.Type, "err", err)
	}
	s.apply(now, r, reply)
}

// hear notes that token id was heard of at now. Loop only.
func (s *Selector) hear(id uint32, now time.Time) {
	if int(id) < len(s.heard) {
		s.heard[id], s.known[id] = now, true
	}
}

// lookupAfter is how long token i must be silent before this peer looks
// up the live peers nearest its name: half of Config.JoinWait for a token
// never heard of, three quarters of DeadAfter for one heard of. The
// lookup has a quarter of T_dead to answer before the mint is due; a
// failed one is made again then, and the mint waits for its answer
// (mintGate). Sooner, the news of live tokens, seconds behind their
// holders, set lookups off by the thousand (experiments/README.md,
// "Trimmed connections, and lookups of live tokens' names").
func (s *Selector) lookupAfter(i int) time.Duration {
	if !s.known[i] {
		return s.opts.Config.joinWait() / 2
	}
	return s.opts.Config.DeadAfter * 3 / 4
}

// mayMint reports whether this peer is XOR-nearer token id's name than
// every peer near it in its routing table, as setView last found them, but
// those that hold a token (a search of the routing table for every silent
// token on every Tick was 5% of the machine at 2000 peers): whether to look
// the name up. The model ranks the same way, holders aside, and mints
// first only on the lookup's answer (mintGate).
//
// Once the token has been heard of, only connected entries count: a peer
// this one is not connected to may be dead (its routing-table entry
// outlives it until a query to it fails), and the token's silence may be
// its holder's death. A token never heard of — a swarm's start, a peer's
// join — is not a death, and the table's word is taken: with the
// connection managers trimming most of the table's connections, the
// connected check alone sent many peers of a large swarm to look up every
// token's name in the selection's first seconds (experiments/README.md,
// "Lookups at the selection's start").
func (s *Selector) mayMint(id uint32, holders map[string]bool) bool {
	key := TokenKey(id)
	self := s.node.Key()
	net := s.node.Host().Network()
	heard := int(id) < len(s.known) && s.known[id]
	for _, p := range s.rtNear[id] {
		if (!heard || net.Connectedness(p) == lpnet.Connected) && !holders[string(p)] && key.Closer(dht.KeyOf(p), self) {
			return false
		}
	}
	return true
}

// mintGate lets the model mint token id as the first in line (rank 0)
// only once a lookup of its name has answered since the token was last
// heard of (the answer is among the peers the model ranks against,
// setView). Without it the model ranked on whatever peers setView last
// gave it, the routing table's connected ones among them; a peer whose
// nearer neighbour's connection the connection manager had just trimmed
// ranked first and minted a token its nearer neighbour had minted already,
// before its own lookup came back (experiments/README.md, "Where the extra
// mints come from" and "The mint gate back, to rest"). A later rank mints T_dead
// or more after the first could, by when news of a live token has
// arrived, and needs no lookup: a nearer peer that runs the DHT but not
// the method (mayMint would not look up past it) must not keep the token
// from being minted. Loop only (the model's Tick calls it).
func (s *Selector) mintGate(id uint32, rank int) bool {
	return rank > 0 || int(id) < len(s.answered) && s.answered[id].After(s.heard[id])
}

// lookupNames finds the live peers XOR-closest to each token's name, all
// at once.
func (s *Selector) lookupNames(ctx context.Context, ids []uint32) {
	out := make(map[uint32][]peer.ID, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stats.Add(statLookups, 1)
			ps, err := s.node.Closest(ctx, TokenKey(id), s.opts.MintLookup)
			if err != nil {
				if ctx.Err() == nil {
					s.stats.Add(statLookupFails, 1)
				}
				return
			}
			mu.Lock()
			out[id] = ps
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		s.post(ctx, input{closest: out})
	}
}

// setView hands the model its coordinate and the peers it should know: the
// Vivaldi peers nearest by coordinate that are still connected, its
// attached clients, and the live peers nearest the names of silent tokens.
func (s *Selector) setView(now time.Time, closest map[uint32][]peer.ID) {
	me := s.viv.Coordinate()
	s.model.SetCoord(me)
	self := s.node.ID()
	h := s.node.Host()
	s.mu.Lock()
	for p, until := range s.unreachable {
		if now.After(until) {
			delete(s.unreachable, p)
		}
	}
	bad := make(map[peer.ID]bool, len(s.unreachable))
	for p := range s.unreachable {
		bad[p] = true
	}
	s.mu.Unlock()

	// The nearest connected peers by coordinate, without copying every
	// coordinate the service holds (thousands at 2 000 peers).
	net := h.Network()
	ns, nc := s.viv.NearestPeers(me, s.opts.Neighbours, func(p peer.ID) bool {
		return p == self || bad[p] || net.Connectedness(p) != lpnet.Connected
	})
	var clients []peer.ID
	var cc map[peer.ID]superpeer.ClientCoord
	if _, holding := s.model.Held(); holding {
		clients, cc = s.attach.Clients(), s.attach.ClientCoords()
	}
	// The routing table's peers nearest each token's name: enough for the
	// model to see that this peer is not the one to mint it (the rank of a
	// peer that is comes from the lookups above). The table changes slowly
	// once joined, and a stale entry costs at most a lookup (mayMint), so
	// they are looked up again every quarter of T_dead, not every View.
	if now.Sub(s.rtNearAt) >= s.opts.Config.DeadAfter/4 || s.rtNearAt.IsZero() {
		s.rtNearAt = now
		rt := s.node.RoutingTable()
		for i := range s.rtNear {
			key := TokenKey(uint32(i))
			s.rtNear[i] = rt.NearestPeers(kb.ID(key[:]), s.opts.MintLookup)
		}
	}
	n := len(ns) + len(clients)
	for _, ps := range closest {
		n += len(ps)
	}
	for _, ps := range s.rtNear {
		n += len(ps)
	}
	seen := make(map[peer.ID]int, n)
	peers := make([]Peer, 0, n)
	add := func(p peer.ID, attached bool, c vivaldi.Coord, known bool) {
		if i, ok := seen[p]; ok {
			peers[i].Attached = peers[i].Attached || attached
			return
		}
		if !known {
			c, _ = s.viv.PeerCoordinate(p)
		}
		seen[p] = len(peers)
		peers = append(peers, Peer{ID: string(p), Key: PeerKey(string(p)), Coord: c, Attached: attached})
	}
	for i, p := range ns {
		add(p, false, nc[i], true)
	}
	for _, c := range clients {
		// A client's coordinate comes with each of its attach requests
		// (every Renew), fresher than the last Vivaldi exchange with it.
		if x, ok := cc[c]; ok && len(x.Vec) == len(me.Vec) {
			add(c, true, vivaldi.Coord{Vec: x.Vec, Height: x.Height}, true)
			continue
		}
		add(c, true, vivaldi.Coord{}, false)
	}
	for _, ps := range closest {
		for _, p := range ps {
			if p != self && !bad[p] {
				add(p, false, vivaldi.Coord{}, false)
			}
		}
	}
	for _, ps := range s.rtNear {
		for _, p := range ps {
			// Dead peers linger in the routing table; one nearer the name
			// would push this peer's turn to mint back by T_dead.
			if !bad[p] && net.Connectedness(p) == lpnet.Connected {
				add(p, false, vivaldi.Coord{}, false)
			}
		}
	}
	s.model.SetPeers(peers)
}

// apply carries out a Ready: publishes announcements, sends move offers,
// hands the answer to a move offer back to its stream, counts events and
// publishes the new state.
func (s *Selector) apply(now time.Time, r Ready, reply chan *Message) {
	count := s.model.Count()
	recount := count.S != len(s.heard)
	if recount {
		s.fitTokens(count.S)
	}
	var answer *Message
	for _, m := range r.Messages {
		switch m.Type {
		case MsgAnnounce:
			if s.table != nil {
				s.announce(now, m.Token)
				continue
			}
			b, err := EncodeAnnounce(m.Token)
			if err != nil {
				log.Warnw("repel: cannot encode own announcement", "err", err)
				continue
			}
			// Only the latest announcement matters (it supersedes the
			// earlier ones): a publisher that lags drops the older.
			select {
			case s.pub <- b:
			default:
				select {
				case <-s.pub:
					s.stats.Add(statPublishDrop, 1)
				default:
				}
				select {
				case s.pub <- b:
				default:
					s.stats.Add(statPublishDrop, 1)
				}
			}
		case MsgMove:
			var err error
			if m.Token, err = signHandover(m.Token, s.key); err != nil {
				log.Warnw("repel: cannot sign a hand-over", "err", err)
				continue
			}
			s.wg.Add(1)
			go func(m Message) { defer s.wg.Done(); s.sendMove(m) }(m)
		case MsgSurvey, MsgSurveyReport:
			s.wg.Add(1)
			go func(m Message) { defer s.wg.Done(); s.sendSurvey(m) }(m)
		case MsgMoveAck, MsgMoveRefuse:
			if reply != nil && answer == nil {
				m := m
				answer = &m
			}
		}
	}
	if reply != nil {
		reply <- answer
	}
	for _, id := range r.Probes {
		s.wg.Add(1)
		go func(p peer.ID) { defer s.wg.Done(); s.probeHolder(p) }(peer.ID(id))
	}
	for _, e := range r.Events {
		s.stats.Add(e.Kind.String(), 1)
	}
	// The snapshot copies every token: only on a change, or once a View.
	if len(r.Events) == 0 && !r.RoleChanged && !recount && count == s.snap.count && now.Sub(s.lastSnap) < s.opts.View {
		return
	}
	s.lastSnap = now
	held, holding := s.model.Held()
	held.Digest = nil
	offer, offering := s.model.pendingOffer()
	offer.Digest = nil
	live := s.model.liveTokens(now)
	for i := range live {
		live[i].Digest = nil // readers need holders and places only
	}
	s.mu.Lock()
	changed := holding != s.snap.holding || r.Role != s.snap.role || holderSetChanged(s.snap.live, live) || count.S != s.snap.count.S
	lost := s.snap.holding && !holding
	s.snap = snapshot{role: r.Role, held: held, holding: holding, offer: offer, offering: offering, live: live, surveyed: s.model.Surveyed(), count: count}
	s.publishStateLocked("token "+r.Role.String(), now)
	s.mu.Unlock()
	if lost {
		// Our clients must find the token's new holder.
		s.attach.DropClients()
	}
	if changed {
		s.kickAttacher()
	}
}

// fitTokens makes the per-token state fit a count of S (Config.Fraction):
// a token a larger count adds was heard of never, so it is silent from now;
// a smaller count's retired tokens are forgotten. Loop only.
func (s *Selector) fitTokens(S int) {
	for len(s.heard) < S {
		s.heard = append(s.heard, time.Now())
		s.known = append(s.known, false)
		s.looked = append(s.looked, time.Time{})
		s.answered = append(s.answered, time.Time{})
		s.rtNear = append(s.rtNear, nil)
		s.rtNearAt = time.Time{} // the new tokens' nearest at the next setView
	}
	s.heard, s.known, s.looked, s.answered, s.rtNear = s.heard[:S:S], s.known[:S:S], s.looked[:S:S], s.answered[:S:S], s.rtNear[:S:S]
	s.sigs.Limit = verifiedSigsFor(S)
	s.certs.Limit = s.sigs.Limit
	if s.table != nil {
		s.table.resize(S)
		for len(s.digests) < S {
			s.digests = append(s.digests, Token{})
		}
		s.digests = s.digests[:S:S]
	}
}

// Count is the token count this peer holds (Config.Fraction; the fixed
// Config.Tokens without one) and the version that set it.
func (s *Selector) Count() Count {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.count
}

// holderSetChanged reports whether the live tokens' holders differ.
func holderSetChanged(a, b []Token) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Holder != b[i].Holder {
			return true
		}
	}
	return false
}

// publishStateLocked tells subscribers the selector's state: a holder whose
// token settled is a superpeer; an unsettled holder is a client served by
// nobody (it serves clients of its own); anyone else is the client of the
// holder it attached to. s.mu held.
func (s *Selector) publishStateLocked(reason string, now time.Time) {
	switch {
	case s.snap.holding && s.snap.role == superpeer.Superpeer:
		s.note.Set(superpeer.Superpeer, s.node.ID(), fmt.Sprintf("token %d settled", s.snap.held.ID), now)
	case s.snap.holding:
		s.note.Set(superpeer.Client, "", fmt.Sprintf("holds token %d, settling", s.snap.held.ID), now)
	default:
		s.note.Set(superpeer.Client, s.attached, reason, now)
	}
}

// attachRole is what the attach protocol answers as: a holder, settled or
// not, serves clients; anyone else points at the holder it is attached to.
func (s *Selector) attachRole() (superpeer.Role, peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap.holding {
		return superpeer.Superpeer, s.node.ID()
	}
	return superpeer.Client, s.attached
}

// publish sends announcements on the topic, in order.
func (s *Selector) publish(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-s.pub:
			if err := s.topic.Publish(ctx, b); err != nil {
				log.Debugw("repel: publish failed", "err", err)
				continue
			}
			s.stats.Add(statAnnounceSent, 1)
			s.stats.Add(statAnnounceBytes, uint64(len(b)))
		}
	}
}

// receive feeds validated announcements of other peers to the loop.
func (s *Selector) receive(ctx context.Context) {
	self := s.node.ID()
	for {
		m, err := s.sub.Next(ctx)
		if err != nil {
			return
		}
		if m.GetFrom() == self {
			continue
		}
		t, ok := m.ValidatorData.(Token)
		if !ok {
			continue
		}
		s.stats.Add(statAnnounceRecv, 1)
		if !s.post(ctx, input{msg: Message{Type: MsgAnnounce, From: string(m.GetFrom()), Token: t}}) {
			return
		}
	}
}

// sample is one Vivaldi exchange with p for an RTT this peer acts on
// (SampleOnce: on a service WithTidyConns, a connection it opens does not
// outlive it unless someone wants it — a holder's client or our own holder
// is protected), asked
// again up to stallRetries times while this process stalls in it
// (vivaldi.ErrStalled: the RTT measured the machine; the peer is not at
// fault, and a failure would rank it last).
func (s *Selector) sample(ctx context.Context, p peer.ID) (time.Duration, error) {
	for try := 0; ; try++ {
		rtt, err := s.viv.SampleOnce(ctx, p)
		if !errors.Is(err, vivaldi.ErrStalled) || try == stallRetries || ctx.Err() != nil {
			return rtt, err
		}
		s.stats.Add(statStalledRetries, 1)
	}
}

// stallRetries bounds the exchanges Selector.sample asks again.
const stallRetries = 3

// probeHolder measures the RTT to p (another holder, or a client attached
// to this one) with one Vivaldi exchange, as the model asked
// (Ready.Probes), and hands it to the loop. The exchange is also a Vivaldi
// sample like any other.
func (s *Selector) probeHolder(p peer.ID) {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.Config.MoveTimeout)
	defer cancel()
	s.stats.Add(statHolderProbes, 1)
	rtt, err := s.sample(ctx, p)
	if err != nil {
		s.stats.Add(statProbesFailed, 1)
	}
	s.post(s.ctx, input{probe: &probeAnswer{id: p, rtt: rtt, ok: err == nil}})
}

func init() {
	superpeer.Register(superpeer.Method{
		Name:        "repel",
		Summary:     "S tokens repel each other in Vivaldi space; a peer that keeps one long enough is a superpeer, and clients attach to the nearest",
		Coordinates: true,
		New: func(node *dht.Node, env superpeer.Env) (superpeer.Selector, error) {
			own, ok := env.Options.([]Option)
			if !ok && env.Options != nil {
				return nil, fmt.Errorf("%w: repel takes []repel.Option, not %T", superpeer.ErrMethodOptions, env.Options)
			}
			opts := append([]Option(nil), own...)
			if env.Registerer != nil {
				opts = append(opts, WithRegisterer(env.Registerer))
			}
			if env.Vivaldi != nil {
				opts = append(opts, WithVivaldi(env.Vivaldi))
			}
			if env.Superpeers != 0 {
				opts = append(opts, func(o *selectorOptions) error {
					if o.Config == (Config{}) {
						o.Config = DefaultConfig()
					}
					o.Config.Tokens = env.Superpeers
					return nil
				})
			}
			if env.Seed != 0 {
				opts = append(opts, WithSeed(env.Seed))
			}
			opts = append(opts, WithAttach(env.Attach...))
			return NewSelector(node, opts...)
		},
	})
}
