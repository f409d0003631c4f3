package vivaldi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	logging "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/superpeer-overlay/superpeer/internal/counters"
	"github.com/superpeer-overlay/superpeer/internal/limits"
	"github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// defaultPrefix is the protocol prefix without WithProtocolPrefix: the
// exchange speaks /superpeer/vivaldi/1.0.0, as dht.DefaultProtocolPrefix's
// overlay does.
const defaultPrefix protocol.ID = "/superpeer"

// exchangeProtocol is the coordinate exchange's protocol ID under prefix.
func exchangeProtocol(prefix protocol.ID) protocol.ID { return prefix + "/vivaldi/1.0.0" }

var log = logging.Logger("vivaldi")

// NearTag is the connection manager tag a service puts on its near
// neighbours (WithTidyConns), at NearTagValue: twice what kad-dht gives a
// routing table peer, so that a trim keeps the near neighbours first.
const (
	NearTag      = "vivaldi-near"
	NearTagValue = 10
)

// kadTag is kad-dht's tag on its routing table peers. A routing table
// entry needs no open connection (kad-dht dials it when it uses it), so
// the tag does not keep a probe's connection open.
const kadTag = "kbucket"

// maxPeerCoords bounds the coordinates the service remembers, so callers
// with fresh peer IDs cannot grow its memory without bound.
const maxPeerCoords = 4096

// Service runs the coordinate exchange on a host: it answers requests with
// its coordinate and a few of its neighbours and, on an interval, samples a
// peer — alternately one of its near neighbours (or a candidate it has
// heard of, to measure it) and a random one — timing the exchange as the
// RTT and feeding its Client.
type Service struct {
	h      host.Host
	cfg    config
	proto  protocol.ID // the exchange's, under cfg.prefix
	client *Client

	// candBuf and connBuf hold the random candidates between picks (the
	// sampling loop's alone: candidates).
	candBuf []string
	connBuf []peer.ID

	mu     sync.Mutex // guards rng, peers, implausible, near, counters
	rng    *rand.Rand
	peers  map[peer.ID]Coord // last coordinate heard from each peer
	near   *neighbors
	served uint64
	ok     uint64
	failed uint64
	// transportRTTs counts the ok samples whose RTT came from WithConnRTT.
	transportRTTs uint64
	picked        [4]uint64 // by Kind
	skipped       uint64
	// implausible are the peers whose last sample the model refused as
	// implausible (ErrImplausible): their coordinates are neither kept
	// nor shared until a sample of theirs is taken again.
	implausible map[peer.ID]bool
	// tagMu serialises tagging the near neighbours (syncTags); tagged are
	// the peers tagged NearTag, guarded by it.
	tagMu  sync.Mutex
	tagged map[peer.ID]bool
	// closing is set (under mu) once Close began.
	closing bool
	// probeConns counts what became of the connections probes opened
	// (WithTidyConns; closeProbeConns); dials counts the samples that
	// dialled, by Kind (kindNone: a caller's Sample).
	probeConns [3]atomic.Uint64
	dials      [4]atomic.Uint64

	drops       counters.Set
	stopMetrics func()
	limit       *limits.PerPeer // requests per remote peer (WithRateLimit; nil: none)

	interval  atomic.Int64  // time.Duration
	scale     atomic.Uint64 // math.Float64bits of the time scale (WithTimeScale, SetTimeScale)
	inFlight  atomic.Int32
	piggyback atomic.Pointer[piggybackBox]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Piggyback is another protocol that rides on the coordinate exchanges,
// as memberlist's broadcasts ride on its probes: every request and every
// reply may carry up to MaxPiggyback bytes of its data, so a protocol whose
// messages are few and small spreads them by the exchanges each peer makes
// anyway, with no connection, stream or goroutine of its own. The methods
// are called from the goroutines of the exchanges, concurrently; what they
// return is not modified afterwards.
type Piggyback interface {
	// Request is what to carry on a request to p (nil: nothing).
	Request(p peer.ID) []byte
	// Reply is what to carry on the reply to p, whose request carried req
	// (nil if it carried nothing).
	Reply(p peer.ID, req []byte) []byte
	// Deliver hands over what the reply from p carried (not called when it
	// carried nothing).
	Deliver(p peer.ID, reply []byte)
}

type piggybackBox struct{ p Piggyback }

// SetPiggyback makes p ride on this service's exchanges from now on (nil:
// none). A service carries one protocol at a time: it refuses a second
// until the first is removed with SetPiggyback(nil).
func (s *Service) SetPiggyback(p Piggyback) error {
	if p == nil {
		s.piggyback.Store(nil)
		return nil
	}
	if !s.piggyback.CompareAndSwap(nil, &piggybackBox{p}) {
		return errors.New("vivaldi: the service already carries a piggyback")
	}
	return nil
}

func (s *Service) piggy() Piggyback {
	if b := s.piggyback.Load(); b != nil {
		return b.p
	}
	return nil
}

// ServiceStats counts the service's work.
type ServiceStats struct {
	Model         Stats  // the Client's counters
	Served        uint64 // requests answered
	Samples       uint64 // exchanges that gave an RTT sample
	SampleFailure uint64 // exchanges that failed (dial, stream, bad reply)
	// TransportRTTs counts the samples whose RTT was the transport's own
	// (WithConnRTT) rather than the timed exchange's.
	TransportRTTs uint64
	// NearSamples, Probes and RandomSamples count the peers the service
	// chose to sample, by why (Kind): a near neighbour, a candidate to
	// measure, a random peer.
	NearSamples, Probes, RandomSamples uint64
	// Skipped counts background ticks that found WithMaxInFlight samples
	// still waiting for their reply.
	Skipped uint64
	// Stalled counts the exchanges whose RTT was discarded because this
	// process stalled while timing them (WithStallCheck; the drop reason
	// "stalled"): neither samples nor failures.
	Stalled uint64
	// NearDials, ProbeDials, RandomDials and CallerDials count the
	// samples that dialled a peer not connected, by why it was sampled
	// (the last: a caller's Sample or SampleOnce).
	NearDials, ProbeDials, RandomDials, CallerDials uint64
	// ProbeConnsClosed counts the connections closed after a probe or a
	// SampleOnce (WithTidyConns); ProbeConnsKeptWanted those kept because the peer
	// had become a near neighbour or was protected or tagged by then, and
	// ProbeConnsKeptBusy those kept because a stream was open on them.
	ProbeConnsClosed, ProbeConnsKeptWanted, ProbeConnsKeptBusy uint64
	// Near is the neighbour set's state and counters.
	Near NearStats
}

// NewService starts the protocol on h.
func NewService(h host.Host, opts ...Option) (*Service, error) {
	if h == nil {
		return nil, errors.New("vivaldi: NewService: nil host")
	}
	cfg := defaults()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("vivaldi: %w", err)
		}
	}
	cl, err := NewClient(cfg.model, rand.New(rand.NewSource(cfg.rng.Int63())))
	if err != nil {
		return nil, err
	}
	near, err := newNeighbors(cfg.near, cfg.now, rand.New(rand.NewSource(cfg.rng.Int63())))
	if err != nil {
		return nil, err
	}
	s := &Service{
		h: h, cfg: cfg, proto: exchangeProtocol(cfg.prefix), client: cl, rng: cfg.rng, near: near,
		peers: make(map[peer.ID]Coord), implausible: make(map[peer.ID]bool), tagged: make(map[peer.ID]bool),
	}
	if s.stopMetrics, err = counters.Register(cfg.reg, metricFamilies, s.report); err != nil {
		return nil, fmt.Errorf("vivaldi: metrics: %w", err)
	}
	if !cfg.rateSet {
		cfg.rate, cfg.burst = defaultRate(cfg.interval)
	}
	s.limit = limits.NewPerPeer(cfg.rate, cfg.burst, 0)
	s.interval.Store(int64(cfg.interval))
	s.scale.Store(math.Float64bits(cfg.timeScale))
	s.ctx, s.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(s.proto, s.handle)
	if cfg.interval > 0 {
		s.wg.Add(1)
		go s.loop()
	}
	return s, nil
}

// Close stops sampling and answering. It waits for the sampler and the
// samples in flight to stop.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.h.RemoveStreamHandler(s.proto)
		s.mu.Lock()
		s.closing = true // no closeProbeConns from now on: wg is waited
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		s.untagAll()
		s.stopMetrics()
	})
	return nil
}

// SetInterval changes how often the background sampler starts a sample
// (from its next tick). It does nothing for d ≤ 0 or on a service started
// without background sampling (WithInterval(0)).
func (s *Service) SetInterval(d time.Duration) {
	if d > 0 {
		s.interval.Store(int64(d))
	}
}

// SetTimeScale changes the scale of WithTimeScale to f from the next
// exchange on, for an emulation whose time dilation changes while it runs
// (e.g. coordinates warmed up undilated, then a dilated run): the exchange
// timeout follows it (WithTimeout's times f over WithTimeScale's, at most
// MaxRTT), and a sample in flight across the change is discarded (counted
// as a drop, "rescaled"): its link delays were part one scale, part the
// other.
func (s *Service) SetTimeScale(f float64) error {
	if !(f >= 1) || f > 1000 {
		return fmt.Errorf("vivaldi: SetTimeScale: %v not in [1, 1000]", f)
	}
	s.scale.Store(math.Float64bits(f))
	return nil
}

// timeout bounds one exchange at the time scale now (SetTimeScale).
func (s *Service) timeout() time.Duration {
	f := math.Float64frombits(s.scale.Load())
	return min(MaxRTT, time.Duration(float64(s.cfg.timeout)*f/s.cfg.timeScale))
}

// ProtocolPrefix is the prefix the exchange's protocol ID derives from
// (WithProtocolPrefix).
func (s *Service) ProtocolPrefix() protocol.ID { return s.cfg.prefix }

// Coordinate is this peer's current coordinate.
func (s *Service) Coordinate() Coord { return s.client.GetCoordinate() }

// PeerCoordinates is a copy of the last coordinate heard from every peer.
func (s *Service) PeerCoordinates() map[peer.ID]Coord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[peer.ID]Coord, len(s.peers))
	for p, c := range s.peers {
		out[p] = c.Clone()
	}
	return out
}

// PeerCoordinate is a copy of the last coordinate heard from p, if any.
func (s *Service) PeerCoordinate(p peer.ID) (Coord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.peers[p]
	if !ok {
		return Coord{}, false
	}
	return c.Clone(), true
}

// NearestPeers is up to k of the peers whose last coordinate the service
// holds (PeerCoordinates) that lie nearest the coordinate to, nearest first
// (ties by ID), leaving out those skip says to, with a copy of each one's
// coordinate as the service holds it when they are returned (a peer
// forgotten meanwhile is left out). skip runs without the service's lock,
// so it may call into the host. It copies only the coordinates it returns:
// a caller that wants the few nearest of thousands need not copy them all.
func (s *Service) NearestPeers(to Coord, k int, skip func(peer.ID) bool) ([]peer.ID, []Coord) {
	if k <= 0 || to.Check() != nil {
		return nil, nil
	}
	type pd = keyDist[peer.ID]
	s.mu.Lock()
	all := make([]pd, 0, len(s.peers))
	for p, c := range s.peers {
		if len(c.Vec) == len(to.Vec) {
			all = append(all, pd{p, to.DistanceTo(c)})
		}
	}
	s.mu.Unlock()
	// A heap, popped until k are taken (nearestTo's insertion into the k
	// best would call skip on every peer, under the lock): the callers
	// skip most of the peers known (those not connected), so a full sort
	// would order thousands to take a handful.
	less := pd.before
	down := func(i, n int) {
		for {
			c := 2*i + 1
			if c >= n {
				return
			}
			if c+1 < n && less(all[c+1], all[c]) {
				c++
			}
			if !less(all[c], all[i]) {
				return
			}
			all[i], all[c] = all[c], all[i]
			i = c
		}
	}
	for i := len(all)/2 - 1; i >= 0; i-- {
		down(i, len(all))
	}
	var ids []peer.ID
	for n := len(all); n > 0 && len(ids) < k; n-- {
		x := all[0]
		all[0] = all[n-1]
		down(0, n-1)
		if skip == nil || !skip(x.k) {
			ids = append(ids, x.k)
		}
	}
	coords := make([]Coord, 0, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	out := ids[:0]
	for _, p := range ids {
		// Forgotten since (ForgetPeer, or refused as implausible): left out.
		if c, ok := s.peers[p]; ok {
			out, coords = append(out, p), append(coords, c.Clone())
		}
	}
	return out, coords
}

// Drops counts refused frames and refused neighbour entries by reason:
// "oversize", "decode", "missing_coord", "non_finite", "out_of_range",
// "dimensions", "stream", "neighbor_id", "neighbor_coord", "neighbor_rtt",
// "neighbor_addr", "neighbor_excess", "neighbor_dup", "piggyback_size",
// "rate" (a request past the peer's rate, WithRateLimit), "implausible"
// (a sample the model refused with ErrImplausible; the peer's coordinate
// is then forgotten, and neither kept from its requests nor shared, until
// a sample of its is taken), "rescaled" (a sample timed across
// SetTimeScale, discarded).
func (s *Service) Drops() map[string]uint64 { return s.drops.Snapshot() }

// Stats returns the service's and the model's counters.
func (s *Service) Stats() ServiceStats {
	m := s.client.counters()
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServiceStats{
		Model: m, Served: s.served, Samples: s.ok, SampleFailure: s.failed,
		NearSamples: s.picked[kindNear], Probes: s.picked[kindProbe], RandomSamples: s.picked[kindRandom],
		Skipped: s.skipped, Near: s.near.Stats(), TransportRTTs: s.transportRTTs,
		Stalled:          s.drops.Get(dropStalled),
		ProbeConnsClosed: s.probeConns[probeClosed].Load(), ProbeConnsKeptWanted: s.probeConns[probeKeptWanted].Load(),
		ProbeConnsKeptBusy: s.probeConns[probeKeptBusy].Load(),
		NearDials:          s.dials[kindNear].Load(), ProbeDials: s.dials[kindProbe].Load(), RandomDials: s.dials[kindRandom].Load(),
		CallerDials: s.dials[kindNone].Load(),
	}
}

func (s *Service) drop(reason string, from peer.ID, err error) {
	log.Debugw("vivaldi: dropped frame", "peer", from, "reason", reason, "err", err)
	s.drops.Add(reason, 1)
}

// refused counts a frame's refused neighbour entries.
func (s *Service) refused(f wireFrame, from peer.ID) {
	if len(f.Refused) == 0 {
		return
	}
	log.Debugw("vivaldi: refused neighbour entries", "peer", from, "refused", f.Refused)
	for r, n := range f.Refused {
		s.drops.Add(r, uint64(n))
	}
}

func reasonOf(err error) string {
	var fe *frameError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return dropStream
}

// handle answers one request: read the caller's coordinate, reply with ours
// and, if the caller asks, a few of our neighbours.
func (s *Service) handle(st network.Stream) {
	defer st.Close()
	from := st.Conn().RemotePeer()
	if !s.limit.Allow(s.cfg.now(), string(from)) {
		s.drops.Add(dropRate, 1)
		_ = st.Reset()
		return
	}
	_ = st.SetDeadline(time.Now().Add(s.timeout()))
	// A request carries no neighbours: any entry is refused and counted.
	req, err := readMessage(st, s.cfg.model.Dimensions, 0)
	if err != nil {
		s.drop(reasonOf(err), from, err)
		_ = st.Reset()
		return
	}
	s.refused(req, from)
	rep := s.reply(from, req)
	if pg := s.piggy(); pg != nil {
		if b := pg.Reply(from, req.Piggyback); len(b) <= MaxPiggyback {
			rep.Piggyback = b
		}
	}
	if err := pbio.NewDelimitedWriter(st).WriteMsg(rep); err != nil {
		_ = st.Reset()
		return
	}
	me := s.client.GetCoordinate()
	s.mu.Lock()
	s.served++
	if !s.implausible[from] {
		s.rememberLocked(from, req.Coord)
	}
	// A peer that asks us is a candidate near neighbour too.
	s.near.Offer(me, 0, []offered{{ID: string(from), Coord: req.Coord}})
	s.mu.Unlock()
	// Let the caller close first, once it has the reply. Closing at once
	// is allowed, but some transports (mocknet) flush on close ahead of
	// the link delay, and the caller's RTT sample would come out short.
	var one [1]byte
	_, _ = st.Read(one[:])
}

// reply is our answer to req from the peer from: our coordinate and up to
// req.Want neighbours (shareFor), each with its coordinate and up to
// MaxNeighborAddrs addresses, in a frame within MaxMessageSize.
func (s *Service) reply(from peer.ID, req wireFrame) *pb.Message {
	f := wireFrame{Coord: s.client.GetCoordinate()}
	if k := min(req.Want, maxShare); k > 0 {
		s.mu.Lock()
		for _, sh := range shareFor(s.near, s.h.ID(), from, req.Coord, s.peers, k) {
			id := peer.ID(sh.ID)
			if c, ok := s.peers[id]; ok {
				f.Neighbors = append(f.Neighbors, neighbor{ID: id, RTT: sh.RTT, Coord: c})
			}
		}
		s.mu.Unlock()
		for i := range f.Neighbors {
			f.Neighbors[i].Addrs = shareAddrs(s.h.Peerstore().Addrs(f.Neighbors[i].ID))
		}
	}
	return messageToPB(f)
}

// shareAddrs is up to MaxNeighborAddrs of addrs that fit MaxAddrSize,
// public ones first.
func shareAddrs(addrs []ma.Multiaddr) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, public := range []bool{true, false} {
		for _, a := range addrs {
			if len(out) >= maxNeighborAddrs {
				return out
			}
			if manet.IsPublicAddr(a) == public && len(a.Bytes()) <= maxAddrSize {
				out = append(out, a)
			}
		}
	}
	return out
}

// Sample exchanges coordinates with p, feeds the timed RTT to the model and
// the neighbour set, takes the neighbours in the reply as candidates, and
// returns the RTT.
func (s *Service) Sample(ctx context.Context, p peer.ID) (time.Duration, error) {
	return s.sampleAs(ctx, p, kindNone, false)
}

// SampleOnce is Sample for a one-off measurement: with WithTidyConns, a
// connection it had to open is closed after it as a probe's is, unless by
// then p is a near neighbour, protected or tagged in the connection
// manager, or a stream is open on it.
func (s *Service) SampleOnce(ctx context.Context, p peer.ID) (time.Duration, error) {
	return s.sampleAs(ctx, p, kindNone, true)
}

// sampleCounted is Sample, counted.
func (s *Service) sampleCounted(ctx context.Context, p peer.ID) (time.Duration, error) {
	rtt, transport, err := s.sample(ctx, p)
	s.mu.Lock()
	switch {
	case errors.Is(err, ErrStalled):
		// Not the peer's failure, nor a measurement: counted as a drop.
	case err != nil:
		s.failed++
	default:
		s.ok++
		if transport {
			s.transportRTTs++
		}
	}
	s.mu.Unlock()
	return rtt, err
}

func (s *Service) sample(ctx context.Context, p peer.ID) (time.Duration, bool, error) {
	if p == s.h.ID() {
		return 0, false, errors.New("vivaldi: cannot sample self")
	}
	rtt, transport, stalled, f, err := s.exchange(ctx, p)
	if err != nil {
		s.mu.Lock()
		s.near.Failed(string(p))
		s.mu.Unlock()
		s.syncTags()
		return rtt, false, err
	}
	s.refused(f, p)
	if pg := s.piggy(); pg != nil && len(f.Piggyback) > 0 {
		pg.Deliver(p, f.Piggyback)
	}
	if stalled {
		s.drops.Add(dropStalled, 1)
		if s.cfg.observeStalled != nil {
			s.cfg.observeStalled(p, rtt)
		}
		return 0, false, fmt.Errorf("%w (%s)", ErrStalled, p)
	}
	if s.cfg.observe != nil {
		s.cfg.observe(p, rtt)
	}
	self := s.h.ID()
	cands := make([]offered, 0, len(f.Neighbors))
	dups := 0
	for _, n := range f.Neighbors {
		if n.ID == self || n.ID == p {
			dups++
			continue
		}
		if len(n.Addrs) > 0 && s.h.Network().Connectedness(n.ID) != network.Connected && len(s.h.Peerstore().Addrs(n.ID)) == 0 {
			// Enough to dial it if we measure it; forgotten soon if not.
			s.h.Peerstore().AddAddrs(n.ID, n.Addrs, peerstore.TempAddrTTL)
		}
		cands = append(cands, offered{ID: string(n.ID), Coord: n.Coord, RTT: n.RTT})
	}
	if dups > 0 {
		s.drops.Add(dropNeighborDup, uint64(dups))
	}
	me := s.client.GetCoordinate()
	err = s.client.Update(p.String(), f.Coord, rtt)
	implausible := errors.Is(err, ErrImplausible)
	s.mu.Lock()
	s.near.Observe(string(p), rtt.Seconds())
	s.near.Offer(me, rtt.Seconds(), cands)
	if implausible {
		// Its claim is not one to keep nor to pass on: a method that
		// places superpeers by coordinates would take it.
		delete(s.peers, p)
		if len(s.implausible) >= maxPeerCoords {
			for q := range s.implausible {
				delete(s.implausible, q)
				break
			}
		}
		s.implausible[p] = true
	} else {
		delete(s.implausible, p)
		s.rememberLocked(p, f.Coord)
	}
	s.mu.Unlock()
	s.syncTags()
	if implausible {
		s.drops.Add(dropImplausible, 1)
	}
	return rtt, transport, err
}

// exchange sends our request to p and reads its reply. Only the exchange
// itself is timed: connecting and opening the stream are not, and the
// request is built before the clock starts. (Protocol negotiation rides on
// the request: libp2p negotiates lazily once it knows p speaks the
// protocol; negotiating it first, out of the timed part, changed the sample
// by 0.02 ms on mocknet, at the cost of a round trip.)
func (s *Service) exchange(ctx context.Context, p peer.ID) (rtt time.Duration, transport, stalled bool, f wireFrame, err error) {
	scale := s.scale.Load()
	ctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	req := messageToPB(wireFrame{Coord: s.client.GetCoordinate(), Want: s.cfg.near.Share})
	if pg := s.piggy(); pg != nil {
		if b := pg.Request(p); len(b) <= MaxPiggyback {
			req.Piggyback = b
		}
	}
	st, err := s.h.NewStream(ctx, p, s.proto)
	if err != nil {
		return 0, false, false, wireFrame{}, fmt.Errorf("vivaldi: open stream to %s: %w", p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	w := pbio.NewDelimitedWriter(st)
	start := time.Now()
	if err := w.WriteMsg(req); err != nil {
		_ = st.Reset()
		return 0, false, false, wireFrame{}, fmt.Errorf("vivaldi: send to %s: %w", p, err)
	}
	f, err = readMessage(st, s.cfg.model.Dimensions, s.cfg.near.Share)
	end := time.Now()
	rtt = end.Sub(start)
	if s.cfg.connRTT != nil && err == nil {
		if d, ok := s.cfg.connRTT(st.Conn()); ok {
			rtt, transport = d, true
		}
	}
	stalled = !transport && err == nil && s.cfg.stalled != nil && s.cfg.stalled(start, end)
	if f := math.Float64frombits(scale); f != 1 {
		rtt = time.Duration(float64(rtt) / f)
	}
	if err != nil {
		s.drop(reasonOf(err), p, err)
		_ = st.Reset()
		return 0, false, false, wireFrame{}, fmt.Errorf("vivaldi: reply from %s: %w", p, err)
	}
	if s.scale.Load() != scale {
		s.drops.Add(dropRescaled, 1)
		return 0, false, false, wireFrame{}, fmt.Errorf("vivaldi: sample of %s timed across a change of the time scale", p)
	}
	return rtt, transport, stalled, f, nil
}

// rememberLocked records p's coordinate, forgetting an arbitrary other peer
// when full. Lock held.
func (s *Service) rememberLocked(p peer.ID, c Coord) {
	if _, ok := s.peers[p]; !ok && len(s.peers) >= maxPeerCoords {
		for q := range s.peers {
			delete(s.peers, q)
			break
		}
	}
	s.peers[p] = c
}

// ForgetPeer drops what the service knows of p (gone for good).
func (s *Service) ForgetPeer(p peer.ID) {
	s.mu.Lock()
	delete(s.peers, p)
	delete(s.implausible, p)
	s.near.Forget(string(p))
	s.mu.Unlock()
	s.syncTags()
	s.client.forgetNode(p.String())
}

// syncTags tags the near neighbours NearTag in the host's connection
// manager and untags the peers that left the set (WithTidyConns).
func (s *Service) syncTags() {
	if !s.cfg.tidy {
		return
	}
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	var add, drop []peer.ID
	s.mu.Lock()
	for p := range s.tagged {
		if !s.near.IsMember(string(p)) {
			drop = append(drop, p)
		}
	}
	for id := range s.near.members {
		if p := peer.ID(id); !s.tagged[p] {
			add = append(add, p)
		}
	}
	s.mu.Unlock()
	cm := s.h.ConnManager()
	for _, p := range drop {
		delete(s.tagged, p)
		cm.UntagPeer(p, NearTag)
	}
	for _, p := range add {
		s.tagged[p] = true
		cm.TagPeer(p, NearTag, NearTagValue)
	}
}

// untagAll takes NearTag off every peer (Close).
func (s *Service) untagAll() {
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	for p := range s.tagged {
		s.h.ConnManager().UntagPeer(p, NearTag)
		delete(s.tagged, p)
	}
}

// closeProbeConns closes, closeDelay after a probe of p (or SampleOnce)
// opened them (WithTidyConns), the connections to p that we dialled,
// unless p became a near neighbour meanwhile, the connection manager
// protects it or tags it (but kad-dht's routing table), or a stream is
// open on one. The delay lets what a new connection brings on (identify,
// kad-dht's check of a new peer) finish first. Nothing once Close began.
func (s *Service) closeProbeConns(p peer.ID) {
	d := time.Duration(float64(closeDelay) * math.Float64frombits(s.scale.Load()))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		member := s.near.IsMember(string(p))
		s.mu.Unlock()
		cm := s.h.ConnManager()
		ti := cm.GetTagInfo(p)
		if member || cm.IsProtected(p, "") || (ti != nil && ti.Value > ti.Tags[kadTag]) {
			s.probeConns[probeKeptWanted].Add(1)
			return
		}
		for _, c := range s.h.Network().ConnsToPeer(p) {
			switch {
			case c.Stat().Direction != network.DirOutbound:
			case len(c.GetStreams()) > 0:
				s.probeConns[probeKeptBusy].Add(1)
			case c.Close() == nil:
				s.probeConns[probeClosed].Add(1)
			}
		}
	}()
}

// closeDelay is how long after a probe closeProbeConns looks at its
// connection, in the network's time (WithTimeScale).
const closeDelay = time.Second

// What closeProbeConns did with a probe's connections.
const (
	probeClosed     = iota // closed
	probeKeptWanted        // kept: a near neighbour, protected or tagged
	probeKeptBusy          // kept: a stream open on it
)

// loop starts a sample every interval, jittered uniformly over [½, 1½] of
// it, without waiting for the last one's reply (at most WithMaxInFlight at
// once). Waiting for each reply would make a peer's sampling rate fall with
// its RTTs: on PlanetLab a peer 200–300 ms from most others took a third of
// the samples of one in a dense region.
func (s *Service) loop() {
	defer s.wg.Done()
	s.mu.Lock()
	wait := time.Duration(s.rng.Int63n(int64(s.cfg.interval)))
	s.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if int(s.inFlight.Load()) >= s.cfg.inFlight {
			s.mu.Lock()
			s.skipped++
			s.mu.Unlock()
		} else if p, k, ok := s.pick(); ok {
			s.inFlight.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.inFlight.Add(-1)
				if _, err := s.sampleAs(s.ctx, p, k, k == kindProbe); err != nil {
					log.Debugw("vivaldi: sample failed", "peer", p, "err", err)
				}
			}()
		}
		d := time.Duration(s.interval.Load())
		s.mu.Lock()
		wait = d/2 + time.Duration(s.rng.Int63n(int64(d)))
		s.mu.Unlock()
		t.Reset(wait)
	}
}

// sampleAs samples p, chosen as a k (kindNone: by a caller), counting a
// dial, and closes what it opened if once (WithTidyConns).
func (s *Service) sampleAs(ctx context.Context, p peer.ID, k kind, once bool) (time.Duration, error) {
	fresh := s.h.Network().Connectedness(p) != network.Connected
	if fresh {
		s.dials[k].Add(1)
	}
	rtt, err := s.sampleCounted(ctx, p)
	if fresh && once && s.cfg.tidy {
		s.closeProbeConns(p)
	}
	return rtt, err
}

// candidates are the peers we may sample at random: the peer source, or
// else the host's connected peers, or else the peers in its peerstore.
// Only the sampling loop calls it (pick): the list is built in the
// service's buffers, good until the next call.
func (s *Service) candidates() []string {
	var ps []peer.ID
	if s.cfg.peerSource != nil {
		ps = s.cfg.peerSource()
	}
	if len(ps) > 0 && s.cfg.tidy {
		// Random samples among the connected ones, while there are
		// enough of them to spread the samples over.
		net := s.h.Network()
		conn := s.connBuf[:0]
		for _, p := range ps {
			if net.Connectedness(p) == network.Connected {
				conn = append(conn, p)
			}
		}
		s.connBuf = conn
		if len(conn) >= s.cfg.near.Size {
			ps = conn
		}
	}
	if len(ps) == 0 {
		ps = s.h.Network().Peers()
	}
	if len(ps) == 0 {
		// Nobody connected: peers we know an address of, the ones a
		// bootstrap or an earlier run left in the peerstore.
		ps = s.h.Peerstore().PeersWithAddrs()
	}
	out := s.candBuf[:0]
	for _, p := range ps {
		if p != s.h.ID() && p != "" {
			out = append(out, string(p))
		}
	}
	s.candBuf = out
	return out
}

// pick chooses the next peer (Neighbors.Next): alternately a near sample —
// a candidate worth measuring or the near neighbour sampled least recently
// — and a uniformly random candidate.
//
// The random candidates are gathered (from the peer source, outside the
// lock) only for a pick that needs them.
func (s *Service) pick() (peer.ID, kind, bool) {
	s.mu.Lock()
	id, kind, want, tried := s.near.nextNear()
	s.mu.Unlock()
	if want {
		cands := s.candidates()
		s.mu.Lock()
		id, kind = s.near.nextRandom(cands, tried)
		s.mu.Unlock()
	}
	if kind == kindNone || peer.ID(id) == s.h.ID() {
		return "", kindNone, false
	}
	s.mu.Lock()
	s.picked[kind]++
	s.mu.Unlock()
	return peer.ID(id), kind, true
}
