package dht

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	kadpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	kb "github.com/libp2p/go-libp2p-kbucket"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
)

// DefaultProtocolPrefix is the prefix of every protocol of the overlay
// (Node.ProtocolPrefix) unless ProtocolPrefix says otherwise. It keeps our
// DHT apart from the public IPFS one: kad-dht speaks /superpeer/kad/1.0.0,
// which no public peer answers.
const DefaultProtocolPrefix protocol.ID = "/superpeer"

// Errors of inconsistent options.
var (
	// ErrKadOption: an option that configures the kad-dht the node builds
	// (WithBucketSize, WithConcurrency, WithRoutingTableRefresh, WithKadOptions,
	// WithReuseStreams) given with WithKad, whose kad-dht its owner configured.
	ErrKadOption = errors.New("dht: option for a kad-dht the node builds, given with WithKad")
	// ErrOtherHost: the kad-dht given with WithKad runs on another host.
	ErrOtherHost = errors.New("dht: the kad-dht given runs on another host")
	// ErrPubSubOption: WithGossipSub (the node builds a router) given with
	// WithPubSub (the application's router).
	ErrPubSubOption = errors.New("dht: WithGossipSub given with WithPubSub")
)

// routingPoll is how often a node on an application's kad-dht (WithKad)
// compares the routing table with its last look, for WatchRoutingTable.
const routingPoll = 250 * time.Millisecond

// smallNetwork is the size below which kad-dht's netsize estimator has too
// few peers to work (it needs a full bucket of 20 answers).
const smallNetwork = 21

type config struct {
	prefix        protocol.ID
	bootstrap     []peer.AddrInfo
	gossip        bool
	gossipOpts    []pubsub.Option
	bucketSize    int
	alpha         int
	beta          int
	autoRefresh   bool
	refreshPeriod time.Duration
	lookupTimeout time.Duration
	extra         []kaddht.Option
	reuseStreams  bool
	reg           prometheus.Registerer

	kad     *kaddht.IpfsDHT // the application's (WithKad), or nil
	ps      *pubsub.PubSub  // the application's (WithPubSub), or nil
	kadOnly []string        // the options given that configure a kad-dht we build
}

// Option configures a Node.
type Option func(*config) error

// WithProtocolPrefix sets the prefix of the overlay's protocols (default
// /superpeer): kad-dht's (unless WithKad: then its owner chose them), the
// raw-key lookup's, and those of the components built on the node (the
// attach protocol, repel's protocols and topic; give vivaldi.Service the
// same with vivaldi.WithProtocolPrefix). Overlays under different prefixes
// share a host without seeing each other.
func WithProtocolPrefix(p protocol.ID) Option {
	return func(c *config) error {
		if p == "" || p[0] != '/' {
			return fmt.Errorf("dht.WithProtocolPrefix: %q must start with /", p)
		}
		c.prefix = p
		return nil
	}
}

// WithBootstrap gives peers to connect to when the node starts.
func WithBootstrap(peers ...peer.AddrInfo) Option {
	return func(c *config) error {
		for _, p := range peers {
			if p.ID == "" {
				return errors.New("dht.WithBootstrap: peer without an ID")
			}
		}
		c.bootstrap = append(c.bootstrap, peers...)
		return nil
	}
}

// WithGossipSub also starts a GossipSub router on the host, for the methods that
// gossip (repel); the node's context bounds it. An application that runs
// pubsub already gives its router with WithPubSub instead.
func WithGossipSub(opts ...pubsub.Option) Option {
	return func(c *config) error {
		c.gossip = true
		c.gossipOpts = opts
		return nil
	}
}

// WithBucketSize is kad-dht's k (default 20).
func WithBucketSize(k int) Option {
	return func(c *config) error {
		if k < 1 {
			return fmt.Errorf("dht.WithBucketSize: %d must be at least 1", k)
		}
		c.kadOnly = append(c.kadOnly, "WithBucketSize")
		c.bucketSize = k
		return nil
	}
}

// WithConcurrency is α, the parallelism of lookups (default 3).
func WithConcurrency(alpha int) Option {
	return func(c *config) error {
		if alpha < 1 {
			return fmt.Errorf("dht.WithConcurrency: %d must be at least 1", alpha)
		}
		c.kadOnly = append(c.kadOnly, "WithConcurrency")
		c.alpha = alpha
		return nil
	}
}

// WithResiliency is β of the raw-key lookup (Closest): it ends once the
// max(count, β) closest live peers it has heard of have all answered
// (default 3, as kad-dht's own lookups, kaddht.Resiliency). A larger β asks
// more peers near the target before it trusts the answer; the bucket size
// asks all k of them.
func WithResiliency(beta int) Option {
	return func(c *config) error {
		if beta < 1 {
			return fmt.Errorf("dht.WithResiliency: %d must be at least 1", beta)
		}
		c.beta = beta
		return nil
	}
}

// WithRoutingTableRefresh sets how often kad-dht refreshes its routing table;
// 0 turns periodic refresh off (the node still refreshes when it bootstraps).
func WithRoutingTableRefresh(period time.Duration) Option {
	return func(c *config) error {
		if period < 0 {
			return fmt.Errorf("dht.WithRoutingTableRefresh: %v is negative", period)
		}
		c.kadOnly = append(c.kadOnly, "WithRoutingTableRefresh")
		c.autoRefresh = period > 0
		c.refreshPeriod = period
		return nil
	}
}

// WithLookupTimeout bounds one lookup (default 20 s); each request of a
// raw-key lookup gets a quarter of it, each kad-dht request half (10 s by
// default, kad-dht's own sender's read timeout: kad-dht drops a peer whose
// request failed from its routing table, so a slow peer is not cut sooner
// than kad-dht itself would).
func WithLookupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("dht.WithLookupTimeout: %v must be positive", d)
		}
		c.lookupTimeout = d
		return nil
	}
}

// WithKadOptions passes options straight to kad-dht, after ours.
func WithKadOptions(opts ...kaddht.Option) Option {
	return func(c *config) error {
		c.kadOnly = append(c.kadOnly, "WithKadOptions")
		c.extra = append(c.extra, opts...)
		return nil
	}
}

// WithKad runs the node on the application's kad-dht instead of building
// one: it must run on the node's host (else ErrOtherHost), and in server
// mode, or other peers never put this one in their routing tables. Its
// owner configured it, so the options that configure the kad-dht the node
// builds are refused with it (ErrKadOption); its protocols are its own, and
// ProtocolPrefix sets only the node's (the raw-key lookup, which answers
// from this kad-dht's routing table, and the components built on the node).
// Close leaves it running, and the node never touches its routing table's
// callbacks: WatchRoutingTable compares the table with its last look every
// quarter second instead (PeerAdded and PeerRemoved are plain fields that
// kad-dht calls under a lock of its own, so writing them while it runs is
// a data race, and the owner may set them again later). Stats.KadSent
// stays 0: kad-dht sends with its own message sender.
func WithKad(kad *kaddht.IpfsDHT) Option {
	return func(c *config) error {
		if kad == nil {
			return errors.New("dht.WithKad: nil kad-dht")
		}
		c.kad = kad
		return nil
	}
}

// WithPubSub gives the node the application's pubsub router (Node.PubSub),
// for the methods that gossip, in place of WithGossipSub (with which it is
// refused: ErrPubSubOption). It must run on the node's host; pubsub does
// not say which host it runs on, so New cannot check. Close leaves it
// running; a method unregisters what it registered on it (repel: its
// topic and the topic's validator) when it closes.
func WithPubSub(ps *pubsub.PubSub) Option {
	return func(c *config) error {
		if ps == nil {
			return errors.New("dht.WithPubSub: nil pubsub")
		}
		c.ps = ps
		return nil
	}
}

// Node is a libp2p host running kad-dht in server mode under our protocol
// prefix, optionally GossipSub, and the raw-key lookup protocol. The host
// belongs to the caller: an application embeds a Node in its own host, and
// Close leaves the host running, as it leaves a kad-dht or a pubsub router
// the application gave (WithKad, WithPubSub).
type Node struct {
	h      host.Host
	kad    *kaddht.IpfsDHT
	ownKad bool // the node built kad, and closes it
	ps     *pubsub.PubSub
	key    Key
	cfg    config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the routing-table poll (WithKad)
	stats  *Stats

	stopMetrics func()
	closeOnce   sync.Once

	watchMu  sync.Mutex
	watchers map[chan RoutingEvent]struct{}
}

// RoutingEvent is a peer entering or leaving the routing table.
type RoutingEvent struct {
	Peer  peer.ID
	Added bool
}

// WatchRoutingTable delivers routing-table changes until cancel. Events
// that find the channel full are dropped: a watcher that must not miss the
// state should read the table itself after an event. On the application's
// kad-dht (WithKad) the events are the differences between looks at the
// table a quarter second apart.
func (n *Node) WatchRoutingTable() (<-chan RoutingEvent, func()) {
	ch := make(chan RoutingEvent, 64)
	n.watchMu.Lock()
	if n.watchers == nil {
		n.watchers = map[chan RoutingEvent]struct{}{}
	}
	n.watchers[ch] = struct{}{}
	n.watchMu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.watchMu.Lock()
			delete(n.watchers, ch)
			n.watchMu.Unlock()
		})
	}
}

func (n *Node) routingEvent(p peer.ID, added bool) {
	n.watchMu.Lock()
	defer n.watchMu.Unlock()
	for ch := range n.watchers {
		select {
		case ch <- RoutingEvent{p, added}:
		default:
		}
	}
}

// New starts a Node on h. It does not dial anyone: call Bootstrap. Create
// it before h has connections of its own (see WatchRoutingTable), unless it
// runs on the application's kad-dht (WithKad). ctx bounds the node's
// background work: the GossipSub it builds, and its watch of an
// application's kad-dht's routing table.
func New(ctx context.Context, h host.Host, opts ...Option) (*Node, error) {
	cfg := config{
		prefix:        DefaultProtocolPrefix,
		bucketSize:    20,
		alpha:         3,
		beta:          3,
		autoRefresh:   true,
		refreshPeriod: 10 * time.Minute,
		lookupTimeout: 20 * time.Second,
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.kad != nil {
		if len(cfg.kadOnly) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrKadOption, strings.Join(cfg.kadOnly, ", "))
		}
		if cfg.kad.Host().ID() != h.ID() {
			return nil, fmt.Errorf("%w: %s, not %s", ErrOtherHost, cfg.kad.Host().ID(), h.ID())
		}
		// The raw-key lookup asks for as many peers as the kad-dht's
		// buckets hold.
		cfg.bucketSize = cfg.kad.BucketSize()
	}
	if cfg.ps != nil && cfg.gossip {
		return nil, ErrPubSubOption
	}
	stats := &Stats{}
	kad, own := cfg.kad, cfg.kad == nil
	// Read before kad-dht starts: a host that is connected already may have
	// kad-dht add a peer at once, racing a write of its callbacks (below).
	connected := len(h.Network().Peers()) > 0
	if own {
		var err error
		if kad, err = newKad(h, cfg, stats); err != nil {
			return nil, err
		}
	}
	closeKad := func() {
		if own {
			kad.Close()
		}
	}
	nctx, cancel := context.WithCancel(ctx)
	n := &Node{h: h, kad: kad, ownKad: own, ps: cfg.ps, key: KeyOf(h.ID()), cfg: cfg, ctx: nctx, cancel: cancel, stats: stats}
	if cfg.gossip {
		ps, err := pubsub.NewGossipSub(nctx, h, cfg.gossipOpts...)
		if err != nil {
			cancel()
			closeKad()
			return nil, fmt.Errorf("dht: gossipsub: %w", err)
		}
		n.ps = ps
	}
	var err error
	if n.stopMetrics, err = counters.Register(cfg.reg, metricFamilies, n.report); err != nil {
		cancel()
		closeKad()
		return nil, fmt.Errorf("dht: metrics: %w", err)
	}
	rt := kad.RoutingTable()
	if own && !connected {
		// Chain our watchers after kad-dht's own routing-table callbacks.
		// kad-dht calls them only when it adds a peer it has identified
		// and checked, which takes a round trip after New: a host with no
		// connections yet (the swarm's, peer run's) cannot race this
		// write.
		added, removed := rt.PeerAdded, rt.PeerRemoved
		rt.PeerAdded = func(p peer.ID) { added(p); n.routingEvent(p, true) }
		rt.PeerRemoved = func(p peer.ID) { removed(p); n.routingEvent(p, false) }
	} else {
		// The application's kad-dht runs already, and its callbacks are
		// its owner's; or the host was connected when this node's own
		// kad-dht started, which may be adding a peer now (a data race
		// the race detector found): watch the table instead (see WithKad).
		// Of the application's table only changes are news; every peer in
		// this node's own table came in since New, so the first look
		// reports each of them as added — a peer kad-dht took in before
		// that look is not lost to the watchers.
		known := map[peer.ID]struct{}{}
		if !own {
			known = peerSet(rt.ListPeers())
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.pollRoutingTable(rt, known)
		}()
	}
	h.SetStreamHandler(n.closestProtocol(), n.handleClosest)
	return n, nil
}

// newKad builds the node's own kad-dht.
func newKad(h host.Host, cfg config, stats *Stats) (*kaddht.IpfsDHT, error) {
	kopts := []kaddht.Option{
		kaddht.Mode(kaddht.ModeServer),
		kaddht.ProtocolPrefix(cfg.prefix),
		kaddht.BucketSize(cfg.bucketSize),
		kaddht.Concurrency(cfg.alpha),
		// We store no records: the DHT is a routing substrate here.
		kaddht.DisableProviders(),
		kaddht.DisableValues(),
	}
	if !cfg.reuseStreams {
		kopts = append(kopts, kaddht.WithCustomMessageSender(func(h host.Host, protos []protocol.ID) kadpb.MessageSenderWithDisconnect {
			return &oneShotSender{h: h, protos: protos, stats: stats, timeout: cfg.lookupTimeout / 2}
		}))
	}
	if cfg.autoRefresh {
		kopts = append(kopts, kaddht.RoutingTableRefreshPeriod(cfg.refreshPeriod))
	} else {
		kopts = append(kopts, kaddht.DisableAutoRefresh())
	}
	kopts = append(kopts, cfg.extra...)
	kad, err := kaddht.New(h, kopts...)
	if err != nil {
		return nil, fmt.Errorf("dht: kad-dht: %w", err)
	}
	return kad, nil
}

func peerSet(ps []peer.ID) map[peer.ID]struct{} {
	out := make(map[peer.ID]struct{}, len(ps))
	for _, p := range ps {
		out[p] = struct{}{}
	}
	return out
}

// pollRoutingTable turns the differences between successive looks at rt,
// every routingPoll, into routing events, until the node closes. A peer
// that leaves and comes back between two looks makes no event.
func (n *Node) pollRoutingTable(rt *kb.RoutingTable, known map[peer.ID]struct{}) {
	tick := time.NewTicker(routingPoll)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		now := peerSet(rt.ListPeers())
		for p := range known {
			if _, ok := now[p]; !ok {
				n.routingEvent(p, false)
			}
		}
		for p := range now {
			if _, ok := known[p]; !ok {
				n.routingEvent(p, true)
			}
		}
		known = now
	}
}

// Host is the node's libp2p host.
func (n *Node) Host() host.Host { return n.h }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.h.ID() }

// Key is the node's kad key.
func (n *Node) Key() Key { return n.key }

// ProtocolPrefix is the prefix every protocol of the overlay derives from
// (the ProtocolPrefix option; DefaultProtocolPrefix without it).
func (n *Node) ProtocolPrefix() protocol.ID { return n.cfg.prefix }

// Kad is the underlying kad-dht: the node's own, or the application's
// (WithKad).
func (n *Node) Kad() *kaddht.IpfsDHT { return n.kad }

// PubSub is the pubsub router: the node's GossipSub, the application's
// (WithPubSub), or nil without either option.
func (n *Node) PubSub() *pubsub.PubSub { return n.ps }

// RoutingTable is kad-dht's routing table.
func (n *Node) RoutingTable() *kb.RoutingTable { return n.kad.RoutingTable() }

// Stats are the node's counters.
func (n *Node) Stats() *Stats { return n.stats }

// Bootstrap joins the network (see Join) and then refreshes every bucket
// of the routing table, as kad-dht does at start. It succeeds when at least
// one bootstrap peer answered (or none were given).
func (n *Node) Bootstrap(ctx context.Context, peers ...peer.AddrInfo) error {
	joined, err := n.join(ctx, peers)
	if err != nil || !joined {
		return err
	}
	return n.refresh(ctx)
}

// Join connects to the configured bootstrap peers and any given here, waits
// for one of them to enter the routing table, and looks up the node's own
// key: the Kademlia join, which finds the node's neighbours and makes it
// known to them. Buckets far from the node fill as other peers query it.
// It costs about log n lookups' worth of messages instead of a refresh of
// every bucket, which is what lets thousands of peers join in one process.
func (n *Node) Join(ctx context.Context, peers ...peer.AddrInfo) error {
	joined, err := n.join(ctx, peers)
	if err != nil || !joined {
		return err
	}
	return n.SelfLookup(ctx)
}

// SelfLookup looks up the node's own key with kad-dht, adding the peers it
// meets to the routing table. A node others joined through gains them in
// its table only once kad-dht has checked them; while its table is empty
// and it has connections, SelfLookup waits for that (as Join does, up to
// 30 s) instead of failing on the empty table.
func (n *Node) SelfLookup(ctx context.Context) error {
	if conns := n.h.Network().Peers(); len(conns) > 0 {
		if err := n.waitRoutingTable(ctx, bootstrapWait, conns); err != nil {
			return err
		}
	}
	_, err := n.LookupName(ctx, string(n.h.ID()))
	return err
}

func (n *Node) join(ctx context.Context, peers []peer.AddrInfo) (bool, error) {
	all := append(append([]peer.AddrInfo(nil), n.cfg.bootstrap...), peers...)
	var connected []peer.ID
	var errs []error
	for _, p := range all {
		if p.ID == n.h.ID() {
			continue
		}
		if err := n.h.Connect(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.ID, err))
			continue
		}
		connected = append(connected, p.ID)
	}
	if len(all) > 0 && len(connected) == 0 {
		return false, fmt.Errorf("dht: no bootstrap peer answered: %w", errors.Join(errs...))
	}
	if len(connected) == 0 {
		return false, nil
	}
	// kad-dht adds a connected peer to its routing table only once identify
	// has confirmed it speaks the DHT protocol; a lookup before that finds
	// an empty table.
	return true, n.waitRoutingTable(ctx, bootstrapWait, connected)
}

// bootstrapWait bounds how long Bootstrap waits for a connected peer to
// enter the routing table.
const bootstrapWait = 30 * time.Second

// bootstrapAdd is how long Join leaves kad-dht to add a bootstrap peer
// before adding it itself.
const bootstrapAdd = 5 * time.Second

// waitRoutingTable waits until the routing table holds at least one peer.
// kad-dht adds a connected peer only after a liveness query, once, on
// identify's event; on a loaded machine that query can time out and the
// peer never enters. So a node that built its kad-dht adds the bootstrap
// peers it connected to itself from bootstrapAdd on, those that identify
// showed speak its DHT protocol, as kad-dht does once the query answers;
// it tries again on every tick until one enters, since identify itself may
// not have finished by then on a loaded machine.
func (n *Node) waitRoutingTable(ctx context.Context, limit time.Duration, bootstrap []peer.ID) error {
	rt := n.kad.RoutingTable()
	if rt.Size() > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	addFrom := time.Now().Add(bootstrapAdd)
	for rt.Size() == 0 {
		select {
		case now := <-tick.C:
			if !n.ownKad || now.Before(addFrom) {
				continue // an application's kad-dht adds its peers itself
			}
			for _, p := range bootstrap {
				if ps, err := n.h.Peerstore().SupportsProtocols(p, protocol.ID(n.kadProtocols())); err == nil && len(ps) > 0 {
					_, _ = rt.TryAddPeer(p, true, false)
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("dht: no bootstrap peer entered the routing table (do they run the DHT under %s?): %w", n.kadProtocols(), ctx.Err())
		}
	}
	return nil
}

// refresh runs one kad-dht routing-table refresh and waits for it.
func (n *Node) refresh(ctx context.Context) error {
	select {
	case err := <-n.kad.ForceRefresh():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LookupName finds the peers XOR-closest to KeyOfName(name) with kad-dht's
// own lookup (GetClosestPeers), closest first. The node itself is not in the
// answer, as kad-dht never returns itself.
func (n *Node) LookupName(ctx context.Context, name string) ([]peer.ID, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.lookupTimeout)
	defer cancel()
	n.stats.Lookups.Add(1)
	ps, err := n.kad.GetClosestPeers(ctx, name)
	if err != nil {
		n.stats.LookupErrors.Add(1)
		return nil, err
	}
	sortByDistance(KeyOfName(name), ps)
	return ps, nil
}

// NetworkSize estimates how many peers the DHT has. With a routing table of
// fewer than 21 peers kad-dht's estimator has too little to go on, and the
// table itself, plus this node, is the estimate (exact in a small network).
func (n *Node) NetworkSize() int {
	rt := n.kad.RoutingTable().Size()
	if rt+1 < smallNetwork {
		return rt + 1
	}
	if s, err := n.kad.NetworkSize(); err == nil && s > 0 {
		return int(s)
	}
	return rt + 1
}

// kadProtocols names the kad-dht's protocols, for an error message.
func (n *Node) kadProtocols() string {
	if n.ownKad {
		return string(n.cfg.prefix) + "/kad/1.0.0"
	}
	return "the application's kad-dht protocol"
}

// Close stops our handlers and what the node built: its kad-dht and its
// GossipSub. The host stays up, and so do a kad-dht and a pubsub router
// the application gave (WithKad, WithPubSub).
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.stopMetrics()
		n.h.RemoveStreamHandler(n.closestProtocol())
		n.cancel()
		n.wg.Wait()
		if n.ownKad {
			err = n.kad.Close()
		}
	})
	return err
}
