package vivaldi

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"time"

	logging "github.com/ipfs/go-log/v2"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
)

// ProtocolID is the coordinate-exchange protocol.
const ProtocolID protocol.ID = "/superpeer/vivaldi/1.0.0"

var log = logging.Logger("vivaldi")

// maxPeerCoords bounds the coordinates the service remembers, so callers
// with fresh peer IDs cannot grow its memory without bound.
const maxPeerCoords = 4096

// Service runs the coordinate exchange on a host: it answers requests with
// its coordinate and, on an interval, samples a peer, timing the exchange as
// the RTT and feeding its Client.
type Service struct {
	h      host.Host
	cfg    config
	client *Client

	mu     sync.Mutex // guards rng, peers, drops, counters
	rng    *rand.Rand
	peers  map[peer.ID]Coord // last coordinate heard from each peer
	drops  map[string]uint64
	served uint64
	ok     uint64
	failed uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// ServiceStats counts the service's work.
type ServiceStats struct {
	Model         Stats  // the Client's counters
	Served        uint64 // requests answered
	Samples       uint64 // exchanges that gave an RTT sample
	SampleFailure uint64 // exchanges that failed (dial, stream, bad reply)
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
	s := &Service{
		h: h, cfg: cfg, client: cl, rng: cfg.rng,
		peers: make(map[peer.ID]Coord),
		drops: make(map[string]uint64),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	h.SetStreamHandler(ProtocolID, s.handle)
	if cfg.interval > 0 {
		s.wg.Add(1)
		go s.loop()
	}
	return s, nil
}

// Close stops sampling and answering. It waits for the sampler to stop.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.h.RemoveStreamHandler(ProtocolID)
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// Client is the model the service feeds (for DistanceTo, Stats, ...).
func (s *Service) Client() *Client { return s.client }

// Coordinate is this peer's current coordinate.
func (s *Service) Coordinate() Coord { return s.client.GetCoordinate() }

// PeerCoordinate is the last coordinate heard from p, if any.
func (s *Service) PeerCoordinate(p peer.ID) (Coord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.peers[p]
	return c.Clone(), ok
}

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

// Drops counts refused frames by reason (the Drop* constants).
func (s *Service) Drops() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.drops))
	for k, v := range s.drops {
		out[k] = v
	}
	return out
}

// Stats returns the service's and the model's counters.
func (s *Service) Stats() ServiceStats {
	m := s.client.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServiceStats{Model: m, Served: s.served, Samples: s.ok, SampleFailure: s.failed}
}

func (s *Service) drop(reason string, from peer.ID, err error) {
	log.Debugw("vivaldi: dropped frame", "peer", from, "reason", reason, "err", err)
	s.mu.Lock()
	s.drops[reason]++
	s.mu.Unlock()
}

func reasonOf(err error) string {
	var fe *FrameError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return DropStream
}

// handle answers one request: read the caller's coordinate, reply with ours.
func (s *Service) handle(st network.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.cfg.timeout))
	remote, err := ReadCoord(st, s.cfg.model.Dimensions)
	if err != nil {
		s.drop(reasonOf(err), st.Conn().RemotePeer(), err)
		_ = st.Reset()
		return
	}
	if err := pbio.NewDelimitedWriter(st).WriteMsg(toPB(s.client.GetCoordinate())); err != nil {
		_ = st.Reset()
		return
	}
	s.mu.Lock()
	s.served++
	s.rememberLocked(st.Conn().RemotePeer(), remote)
	s.mu.Unlock()
	// Let the caller close first, once it has the reply. Closing at once
	// is allowed, but some transports (mocknet) flush on close ahead of
	// the link delay, and the caller's RTT sample would come out short.
	var one [1]byte
	_, _ = st.Read(one[:])
}

// Sample exchanges coordinates with p, feeds the timed RTT to the model and
// returns it.
func (s *Service) Sample(ctx context.Context, p peer.ID) (time.Duration, error) {
	rtt, err := s.sample(ctx, p)
	s.mu.Lock()
	if err != nil {
		s.failed++
	} else {
		s.ok++
	}
	s.mu.Unlock()
	return rtt, err
}

func (s *Service) sample(ctx context.Context, p peer.ID) (time.Duration, error) {
	if p == s.h.ID() {
		return 0, errors.New("vivaldi: cannot sample self")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	// Connect and negotiate outside the timed part: a dial or a
	// protocol negotiation costs extra round trips that are not the RTT.
	st, err := s.h.NewStream(ctx, p, ProtocolID)
	if err != nil {
		return 0, fmt.Errorf("vivaldi: open stream to %s: %w", p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	start := time.Now()
	if err := pbio.NewDelimitedWriter(st).WriteMsg(toPB(s.client.GetCoordinate())); err != nil {
		_ = st.Reset()
		return 0, fmt.Errorf("vivaldi: send to %s: %w", p, err)
	}
	remote, err := ReadCoord(st, s.cfg.model.Dimensions)
	rtt := time.Since(start)
	if err != nil {
		s.drop(reasonOf(err), p, err)
		_ = st.Reset()
		return 0, fmt.Errorf("vivaldi: reply from %s: %w", p, err)
	}
	s.mu.Lock()
	s.rememberLocked(p, remote)
	s.mu.Unlock()
	if err := s.client.Update(p.String(), remote, rtt); err != nil {
		return rtt, err
	}
	return rtt, nil
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
	s.mu.Unlock()
	s.client.ForgetNode(p.String())
}

func (s *Service) loop() {
	defer s.wg.Done()
	// Jitter the first sample so peers started together do not all probe
	// in lockstep.
	s.mu.Lock()
	first := time.Duration(s.rng.Int63n(int64(s.cfg.interval)))
	s.mu.Unlock()
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if p, ok := s.pick(); ok {
			if _, err := s.Sample(s.ctx, p); err != nil {
				log.Debugw("vivaldi: sample failed", "peer", p, "err", err)
			}
		}
		t.Reset(s.cfg.interval)
	}
}

// candidates are the peers we may sample: the peer source, or else the
// host's connected peers, or else the peers in its peerstore.
func (s *Service) candidates() []peer.ID {
	var ps []peer.ID
	if s.cfg.peerSource != nil {
		ps = s.cfg.peerSource()
	}
	if len(ps) == 0 {
		ps = s.h.Network().Peers()
	}
	if len(ps) == 0 {
		// Nobody connected: peers we know an address of, the ones a
		// bootstrap or an earlier run left in the peerstore.
		ps = s.h.Peerstore().PeersWithAddrs()
	}
	out := ps[:0:0]
	for _, p := range ps {
		if p != s.h.ID() && p != "" {
			out = append(out, p)
		}
	}
	return out
}

// pick chooses the next peer: with probability nearFraction one of the
// nearCount candidates nearest to us by coordinate (among those whose
// coordinate we know), otherwise a uniformly random candidate.
func (s *Service) pick() (peer.ID, bool) {
	cands := s.candidates()
	if len(cands) == 0 {
		return "", false
	}
	me := s.client.GetCoordinate()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rng.Float64() < s.cfg.nearFraction {
		type pd struct {
			p peer.ID
			d float64
		}
		var known []pd
		for _, p := range cands {
			if c, ok := s.peers[p]; ok {
				known = append(known, pd{p, me.DistanceTo(c)})
			}
		}
		if len(known) > 0 {
			sort.Slice(known, func(i, j int) bool { return known[i].d < known[j].d })
			if len(known) > s.cfg.nearCount {
				known = known[:s.cfg.nearCount]
			}
			return known[s.rng.Intn(len(known))].p, true
		}
	}
	return cands[s.rng.Intn(len(cands))], true
}
