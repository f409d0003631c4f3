package dht

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	msmux "github.com/multiformats/go-multistream"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/superpeer-overlay/superpeer/dht/pb"
	"github.com/superpeer-overlay/superpeer/internal/counters"
	"github.com/superpeer-overlay/superpeer/internal/frame"
)

const (
	// maxClosestRequest caps a request frame: 32 bytes of target and a count.
	maxClosestRequest = 128
	// maxClosestResponse caps an answer: up to maxClosestCount peers with a
	// few addresses each.
	maxClosestResponse = 64 << 10
	// maxClosestCount caps how many peers one answer carries.
	maxClosestCount = 40
	// maxAddrsPerPeer caps the addresses taken per peer from an answer.
	maxAddrsPerPeer      = 8
	closestStreamTimeout = 10 * time.Second
)

// Drop reasons for frames of the closest protocol.
const (
	dropDecode     = "decode"      // the frame is not a valid protobuf or is over the cap
	dropBadTarget  = "bad-target"  // the target is not 32 bytes
	dropBadPeer    = "bad-peer"    // a peer ID in an answer does not parse
	dropBadAddress = "bad-address" // an address in an answer does not parse
	// dropLost: the caller's stream failed before a whole request came —
	// a lookup that called the request off, or a caller gone. Not a bad
	// frame.
	dropLost = "lost"
)

// Stats counts what a node did and what it refused.
type Stats struct {
	Lookups       atomic.Uint64 // lookups started (both kinds)
	LookupErrors  atomic.Uint64 // lookups that failed
	ClosestServed atomic.Uint64 // closest requests answered
	ClosestSent   atomic.Uint64 // closest requests sent
	ClosestFailed atomic.Uint64 // closest requests that got no valid answer in time
	// ClosestCancelled counts closest requests still out when their lookup
	// had its answer (they went to farther peers and were called off):
	// neither answered nor failed.
	ClosestCancelled atomic.Uint64
	KadSent          atomic.Uint64 // kad-dht requests sent (with the one-shot sender)

	drops counters.Set
}

func (s *Stats) drop(reason string) { s.drops.Add(reason, 1) }

// Drops returns a copy of the refused-frame counters by reason: "decode",
// "bad-target", "bad-peer", "bad-address".
func (s *Stats) Drops() map[string]uint64 { return s.drops.Snapshot() }

// closestProtocol is the raw-key lookup's protocol ID:
// /superpeer/kad/closest/1.0.0 under the default prefix.
func (n *Node) closestProtocol() protocol.ID { return n.cfg.prefix + "/kad/closest/1.0.0" }

func (n *Node) handleClosest(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(closestStreamTimeout))
	var req pb.ClosestRequest
	if err := frame.Read(s, maxClosestRequest, &req); err != nil {
		if errors.Is(err, frame.ErrStreamFailed) {
			n.stats.drop(dropLost)
		} else {
			n.stats.drop(dropDecode)
		}
		_ = s.Reset()
		return
	}
	if len(req.Target) != len(Key{}) {
		n.stats.drop(dropBadTarget)
		_ = s.Reset()
		return
	}
	count := int(req.Count)
	if count <= 0 || count > maxClosestCount {
		count = n.cfg.bucketSize
	}
	peers := n.kad.RoutingTable().NearestPeers(kb.ID(req.Target), count)
	resp := &pb.ClosestResponse{Peers: make([]*pb.Peer, 0, len(peers))}
	ps := n.h.Peerstore()
	for _, p := range peers {
		addrs := ps.Addrs(p)
		if len(addrs) > maxAddrsPerPeer {
			addrs = addrs[:maxAddrsPerPeer]
		}
		bp := &pb.Peer{Id: []byte(p)}
		for _, a := range addrs {
			bp.Addrs = append(bp.Addrs, a.Bytes())
		}
		resp.Peers = append(resp.Peers, bp)
	}
	if err := pbio.NewDelimitedWriter(s).WriteMsg(resp); err != nil {
		_ = s.Reset()
		return
	}
	n.stats.ClosestServed.Add(1)
	awaitClose(s)
}

// awaitClose lets the caller close first, once it has the answer: mocknet
// delivers a closing writer's buffered data at once, ahead of the link
// delay, so closing here would hand the caller its answer early.
func awaitClose(s network.Stream) {
	var one [1]byte
	_, _ = s.Read(one[:])
}

// maxAsks is how many failed requests make a candidate dead for a lookup.
const maxAsks = 2

// errLookupEnded cancels the requests a lookup still has out once it has
// its answer.
var errLookupEnded = errors.New("dht: lookup ended")

// failed counts a request that got no answer: called off with its
// lookup (ClosestCancelled) or failed (ClosestFailed).
func (n *Node) failed(ctx context.Context) {
	if errors.Is(context.Cause(ctx), errLookupEnded) {
		n.stats.ClosestCancelled.Add(1)
		return
	}
	n.stats.ClosestFailed.Add(1)
}

// ask sends one closest request to p and returns the peers it named.
func (n *Node) ask(ctx context.Context, p peer.ID, target Key, count int) ([]peer.ID, error) {
	n.stats.ClosestSent.Add(1)
	// One slow or vanished peer must not hold a lookup up for its whole
	// timeout: each request gets a fraction of it.
	ctx, cancel := context.WithTimeout(ctx, n.cfg.lookupTimeout/4)
	defer cancel()
	s, err := n.h.NewStream(ctx, p, n.closestProtocol())
	if err != nil {
		n.failed(ctx)
		var unsupported msmux.ErrNotSupported[protocol.ID]
		if ctx.Err() == nil && (errors.As(err, &unsupported) || n.h.Network().Connectedness(p) != network.Connected) {
			// Unreachable or no longer serving, not slow (the request
			// failed before its deadline, with no connection left or the
			// protocol refused): out of the routing table, as kad-dht's
			// own queries drop such a peer. Left in, a dead peer keeps its
			// bucket's place from the live peers that would take it, and
			// after a mass death lookups named their askers the closest to
			// keys live peers were closer to.
			n.kad.RoutingTable().RemovePeer(p)
		}
		return nil, err
	}
	defer s.Close()
	// Deadlines are not enforced by every transport (mocknet ignores them):
	// a cancelled request resets its stream.
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(closestStreamTimeout))
	if err := pbio.NewDelimitedWriter(s).WriteMsg(&pb.ClosestRequest{Target: target[:], Count: uint32(count)}); err != nil {
		_ = s.Reset()
		n.failed(ctx)
		return nil, err
	}
	var resp pb.ClosestResponse
	if err := frame.ReadMsg(s, maxClosestResponse, &resp); err != nil {
		_ = s.Reset()
		if ctx.Err() == nil && !errors.Is(err, network.ErrReset) {
			// Not called off, timed out or reset: a bad frame.
			n.stats.drop(dropDecode)
		}
		n.failed(ctx)
		return nil, fmt.Errorf("closest answer from %s: %w", p, err)
	}
	peers := decodeClosest(&resp, n.stats.drop)
	ps := n.h.Peerstore()
	out := make([]peer.ID, 0, len(peers))
	for _, ai := range peers {
		if ai.ID != n.h.ID() && len(ai.Addrs) > 0 {
			ps.AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
		}
		out = append(out, ai.ID)
	}
	return out, nil
}

// decodeClosest validates an answer: at most maxClosestCount peers with at
// most maxAddrsPerPeer addresses each; a peer whose ID does not parse and an
// address that does not parse are dropped and counted.
func decodeClosest(resp *pb.ClosestResponse, drop func(reason string)) []peer.AddrInfo {
	out := make([]peer.AddrInfo, 0, min(len(resp.Peers), maxClosestCount))
	for i, bp := range resp.Peers {
		if i >= maxClosestCount {
			break
		}
		id, err := peer.IDFromBytes(bp.Id)
		if err != nil {
			drop(dropBadPeer)
			continue
		}
		ai := peer.AddrInfo{ID: id}
		for j, b := range bp.Addrs {
			if j >= maxAddrsPerPeer {
				break
			}
			a, err := ma.NewMultiaddrBytes(b)
			if err != nil {
				drop(dropBadAddress)
				continue
			}
			ai.Addrs = append(ai.Addrs, a)
		}
		out = append(out, ai)
	}
	return out
}

// Closest finds the count live peers XOR-closest to a raw target of the key
// space, closest first, by an iterative Kademlia lookup (α parallel requests,
// k-wide shortlist, ending once the max(count, β) closest have answered:
// WithResiliency) over the peers' kad-dht routing tables. The node itself
// is a candidate like any other, so Closest(ctx, t, 1)[0] == n.ID() tells a
// node it is the peer responsible for t. Only peers that answered during the
// lookup (and the node itself) are returned: they are known to be live.
func (n *Node) Closest(ctx context.Context, target Key, count int) ([]peer.ID, error) {
	return n.ClosestWhere(ctx, target, count, nil)
}

// ClosestWhere is Closest among the peers keep accepts (every peer if keep
// is nil): the others, the node itself included, are neither asked nor
// answered, as if they were not in the network. keep must be cheap and
// safe to call from the lookup's goroutine (SolvesPuzzle, say).
func (n *Node) ClosestWhere(ctx context.Context, target Key, count int, keep func(peer.ID) bool) ([]peer.ID, error) {
	if count < 1 {
		return nil, fmt.Errorf("dht: Closest: count %d must be at least 1", count)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.lookupTimeout)
	defer cancel()
	// Requests still out when the lookup has its answer are called off
	// with errLookupEnded (counted apart from failures).
	reqCtx, callOff := context.WithCancelCause(ctx)
	defer callOff(errLookupEnded)
	n.stats.Lookups.Add(1)

	k := max(n.cfg.bucketSize, count)
	type cand struct {
		id    peer.ID
		dist  Key
		state int // 0 new, 1 asking, 2 answered, 3 failed
		fails int
	}
	self := n.h.ID()
	cands := map[peer.ID]*cand{self: {id: self, dist: n.key.Xor(target), state: 2}}
	if keep != nil && !keep(self) {
		cands[self].state = 3
	}
	add := func(p peer.ID) {
		if _, ok := cands[p]; !ok {
			if keep != nil && !keep(p) {
				cands[p] = &cand{id: p, state: 3} // never asked, never an answer
				return
			}
			cands[p] = &cand{id: p, dist: KeyOf(p).Xor(target)}
		}
	}
	for _, p := range n.kad.RoutingTable().NearestPeers(kb.ID(target[:]), k) {
		add(p)
	}
	sorted := func() []*cand {
		out := make([]*cand, 0, len(cands))
		for _, c := range cands {
			if c.state != 3 {
				out = append(out, c)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].dist.Less(out[j].dist) })
		return out
	}

	type answer struct {
		from  peer.ID
		peers []peer.ID
		err   error
	}
	answers := make(chan answer, n.cfg.alpha)
	// Requests still out when the lookup ends are called off (callOff).
	inflight := 0
	// The lookup ends once the width closest live candidates have answered
	// (kad-dht's termination with resiliency β): each of them was asked for
	// its k closest to the target and named nobody closer.
	width := max(count, n.cfg.beta)
	for {
		best := sorted()
		if len(best) > k {
			best = best[:k]
		}
		done := true
		for _, c := range best[:min(width, len(best))] {
			done = done && c.state == 2
		}
		if done {
			// Requests still out went to farther peers and cannot change
			// the answer. (Their goroutines finish into the buffered
			// channel.)
			break
		}
		// Ask the closest not-yet-asked candidates among the k best live
		// ones.
		for _, c := range best {
			if inflight >= n.cfg.alpha {
				break
			}
			if c.state == 0 {
				c.state = 1
				inflight++
				go func(p peer.ID) {
					ps, err := n.ask(reqCtx, p, target, k)
					answers <- answer{p, ps, err}
				}(c.id)
			}
		}
		select {
		case a := <-answers:
			inflight--
			if a.err != nil {
				// One failed request does not make a peer dead: on a loaded
				// host a request can time out, and dropping the true
				// closest peer then gives a wrong answer (a peer that
				// believes itself a superpeer). It is asked once more
				// while it is among the k best.
				c := cands[a.from]
				if c.fails++; c.fails < maxAsks {
					c.state = 0
				} else {
					c.state = 3
				}
				continue
			}
			cands[a.from].state = 2
			for _, p := range a.peers {
				add(p)
			}
		case <-ctx.Done():
			n.stats.LookupErrors.Add(1)
			return nil, fmt.Errorf("dht: lookup of %s: %w", target, ctx.Err())
		}
	}
	var out []peer.ID
	for _, c := range sorted() {
		if c.state == 2 {
			out = append(out, c.id)
			if len(out) == count {
				break
			}
		}
	}
	if len(out) == 0 {
		n.stats.LookupErrors.Add(1)
		return nil, errors.New("dht: lookup found no live peer")
	}
	return out, nil
}
