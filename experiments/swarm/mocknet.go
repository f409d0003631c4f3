package swarm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
)

// linker creates mocknet links on first use. mocknet refuses a dial between
// peers that have no link, and LinkAll makes n² links up front (10^8 at
// n = 10 000); a swarm only ever uses the few hundred links each DHT node
// really dials, so each is made when first needed, with the latency of that
// pair from the swarm's RTT space.
type linker struct {
	mn    mocknet.Mocknet
	index map[peer.ID]int
	rtt   func(i, j int) float64 // ms

	// linked holds the pairs that have a link. It is read on every dial to
	// an unconnected peer — thousands of times a second in a large swarm —
	// so it is a sync.Map read without a lock: one mutex on that path made
	// a convoy of ten thousand dialling goroutines at n = 5000.
	linked sync.Map // [2]int → struct{}
	dead   []atomic.Bool
	// closing refuses every dial from Swarm.Cut on.
	closing atomic.Bool
	mu      sync.Mutex // serialises making links and dilating them
	links   atomic.Int64
	// factor is the time dilation (guarded by mu): every link's latency is
	// the pair's RTT/2 times it.
	factor float64

	// pending holds, by connection ID, when a connection was first seen
	// with its identify unfinished by a failed NewStream; stuck counts the
	// connections closed for that (see lazyHost.unstick).
	pending    sync.Map // uint64 conn ID → time.Time
	stuck      atomic.Int64
	stuckAfter time.Duration // identifyStuck; shorter in tests

	// dials counts, by the protocol that asked (the first one NewStream
	// was given, or "connect" for Host.Connect), the dials of a peer that
	// was not connected.
	dials sync.Map // string → *atomic.Uint64
}

// dialed counts a dial for why.
func (l *linker) dialed(why string) {
	c, ok := l.dials.Load(why)
	if !ok {
		c, _ = l.dials.LoadOrStore(why, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(1)
}

// newLinker links the n peers of index (filled in by the caller before any
// dial).
func newLinker(mn mocknet.Mocknet, index map[peer.ID]int, n int, rtt func(i, j int) float64) *linker {
	return &linker{mn: mn, index: index, rtt: rtt, dead: make([]atomic.Bool, n), stuckAfter: identifyStuck, factor: 1}
}

// kill refuses every later dial to or from p and cuts p's links.
func (l *linker) kill(p peer.ID) {
	i := l.index[p]
	l.dead[i].Store(true)
	var partners []int
	l.linked.Range(func(k, _ any) bool {
		pair := k.([2]int)
		if pair[0] == i {
			partners = append(partners, pair[1])
		} else if pair[1] == i {
			partners = append(partners, pair[0])
		}
		return true
	})
	ids := make(map[int]peer.ID, len(partners))
	for id, k := range l.index {
		ids[k] = id
	}
	for _, k := range partners {
		for _, link := range l.mn.LinksBetweenPeers(p, ids[k]) {
			_ = l.mn.Unlink(link)
		}
	}
}

func (l *linker) ensure(a, b peer.ID) error {
	if a == b {
		return nil
	}
	i, ok1 := l.index[a]
	j, ok2 := l.index[b]
	if !ok1 || !ok2 {
		return fmt.Errorf("swarm: peer %s is not in the swarm", b)
	}
	if i > j {
		i, j = j, i
	}
	pair := [2]int{i, j}
	if l.closing.Load() {
		return errors.New("swarm: closing")
	}
	if l.dead[i].Load() || l.dead[j].Load() {
		return fmt.Errorf("swarm: peer %s is down", b)
	}
	if _, ok := l.linked.Load(pair); ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead[i].Load() || l.dead[j].Load() {
		return fmt.Errorf("swarm: peer %s is down", b)
	}
	if _, ok := l.linked.Load(pair); ok {
		return nil
	}
	link, err := l.mn.LinkPeers(a, b)
	if err != nil {
		return err
	}
	link.SetOptions(mocknet.LinkOptions{Latency: l.oneWay(i, j)})
	l.linked.Store(pair, struct{}{})
	l.links.Add(1)
	return nil
}

// oneWay is the latency of the link between peers i and j: mocknet delays
// every write by Latency in each direction, so half the RTT, dilated. l.mu
// held.
func (l *linker) oneWay(i, j int) time.Duration {
	return time.Duration(l.rtt(i, j) / 2 * l.factor * float64(time.Millisecond))
}

// dilate makes every link, those made and those to come, f times slower.
func (l *linker) dilate(f float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.factor = f
	ids := make([]peer.ID, len(l.dead))
	for id, k := range l.index {
		ids[k] = id
	}
	l.linked.Range(func(k, _ any) bool {
		pair := k.([2]int)
		for _, link := range l.mn.LinksBetweenPeers(ids[pair[0]], ids[pair[1]]) {
			link.SetOptions(mocknet.LinkOptions{Latency: l.oneWay(pair[0], pair[1])})
		}
		return true
	})
}

// cut refuses every dial from here on and removes every link, so that no
// dial already past ensure, nor a host's own redial of a peer whose
// connection just closed, can connect again (Swarm.Cut).
func (l *linker) cut() {
	l.closing.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]peer.ID, len(l.dead))
	for id, k := range l.index {
		ids[k] = id
	}
	l.linked.Range(func(k, _ any) bool {
		pair := k.([2]int)
		_ = l.mn.UnlinkPeers(ids[pair[0]], ids[pair[1]])
		return true
	})
}

// lazyHost is a mocknet host that links to a peer before dialling it. Every
// protocol on the peer is given this host, so all dials pass through it.
type lazyHost struct {
	host.Host
	l  *linker
	cm connmgr.ConnManager
}

// ConnManager is the host's connection manager: mocknet's hosts come with
// none, so the swarm gives each one its own (Config.ConnLow, ConnHigh), and
// the protocols tag and protect their peers through it as on a real host.
func (h *lazyHost) ConnManager() connmgr.ConnManager { return h.cm }

// Close closes the connection manager with the host.
func (h *lazyHost) Close() error {
	err := h.Host.Close()
	if cerr := h.cm.Close(); err == nil {
		err = cerr
	}
	return err
}

func (h *lazyHost) Connect(ctx context.Context, pi peer.AddrInfo) error {
	if err := h.l.ensure(h.ID(), pi.ID); err != nil {
		return err
	}
	if h.Network().Connectedness(pi.ID) != network.Connected {
		h.l.dialed("connect")
	}
	return h.Host.Connect(ctx, pi)
}

func (h *lazyHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if h.Network().Connectedness(p) != network.Connected {
		if err := h.l.ensure(h.ID(), p); err != nil {
			return nil, err
		}
		why := "stream"
		if len(pids) > 0 {
			why = string(pids[0])
		}
		h.l.dialed(why)
	}
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil {
		h.unstick(p)
	}
	return s, err
}

// identifyStuck is how long a connection may go without finishing identify.
// Identify gives up on a real transport (30 s), but mocknet ignores
// deadlines, so a lost identify answer leaves it waiting for ever — and
// NewStream waits for identify, so every request between the two peers
// fails while they stay connected. In 5000-peer swarms about one pair in
// a few runs got stuck so, and one peer never held its nearest peer. A
// minute, not less: on a loaded swarm identify can be slow without being
// lost, and closing a connection fails every request in flight on it.
const identifyStuck = time.Minute

// unstick closes the connections to p whose identify has not finished for
// identifyStuck since a NewStream first failed on them; the next request
// dials afresh and identifies again.
func (h *lazyHost) unstick(p peer.ID) {
	ids, ok := h.Host.(interface{ IDService() identify.IDService })
	if !ok {
		return
	}
	for _, c := range h.Network().ConnsToPeer(p) {
		select {
		case <-ids.IDService().IdentifyWait(c):
			h.l.pending.Delete(c.ID())
			continue
		default:
		}
		first, _ := h.l.pending.LoadOrStore(c.ID(), time.Now())
		if time.Since(first.(time.Time)) >= h.l.stuckAfter {
			h.l.pending.Delete(c.ID())
			h.l.stuck.Add(1)
			_ = c.Close()
		}
	}
}
