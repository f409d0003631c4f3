package relay

import (
	"cmp"
	"context"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

// The AutoRelay settings of AutoRelayOptions.
const (
	// NumRelays is how many relays a client holds reservations with:
	// go-libp2p's default, its own superpeer and one more.
	NumRelays = 2
	// MinInterval is the least time between two calls of the source: a
	// client asks again this soon after it attached, or after a relay
	// refused it or went (go-libp2p: 30 s).
	MinInterval = 5 * time.Second
	// Backoff is how long AutoRelay leaves a relay alone after a
	// reservation there failed (go-libp2p: an hour): a superpeer that was
	// full may have room a minute later, when one of its clients has gone
	// (a disconnect frees its reservation at once) or moved to a nearer
	// superpeer, and a client that asks a full one again each minute costs
	// it one refused stream.
	Backoff = time.Minute
	// DefaultPace is WithPace's default.
	DefaultPace = 2 * time.Second
)

// Source is an autorelay.PeerSource made before the host exists (AutoRelay's
// options go to libp2p.New), bound to the host and the selector once they
// exist (Bind). Until bound it offers nothing.
//
// It offers the peer's own superpeer first, then the other peers the host
// knows to speak the hop protocol (its relays: superpeers running Serve),
// nearest first by RTT. AutoRelay shuffles the candidates it holds, so the
// source paces its offers (WithPace): it sends the next peer only once the
// one before is held or the pace has passed, and stops once the host holds
// as many relays as AutoRelay wants (WithNumRelays). AutoRelay then tries
// the peers in the source's order, and the client's own superpeer is its
// first relay (offered all at once, in two of six test networks of three
// superpeers AutoRelay took the two others). The host's relays are read
// from its /p2p-circuit addresses (Held, and AutoRelay's address event),
// which AutoRelay builds only for relays with public addresses: with
// relays on private addresses alone the source never sees one held and
// offers every peer a pace apart.
//
// A relay this host holds whose protocols no longer include the hop
// protocol (its Service stopped: identify push tells) is disconnected at
// the next call, so that AutoRelay lets go of a reservation the relay has
// forgotten and asks again — go-libp2p would keep advertising it until the
// reservation's renewal fails, most of an hour later.
type Source struct {
	rtt    func(peer.ID) (time.Duration, bool) // WithRTT's
	rttSet bool
	pace   time.Duration
	want   int

	mu       sync.Mutex
	h        host.Host
	sel      superpeer.Selector
	rttBound func(peer.ID) (time.Duration, bool) // rtt, or the peerstore's
}

// SourceOption configures NewSource.
type SourceOption func(*Source)

// WithRTT sets how the source measures a peer's RTT (ok false: unknown,
// after the measured ones). Default: the peerstore's LatencyEWMA, unknown
// when 0; a paced source then pings the relays it offers whose RTT is
// unknown (up to eight, once) after its first offer, and offers the rest
// nearest first.
func WithRTT(f func(peer.ID) (time.Duration, bool)) SourceOption {
	return func(s *Source) { s.rtt, s.rttSet = f, f != nil }
}

// WithPace sets how long the source waits for a peer it offered to become
// a relay before it offers the next (default DefaultPace); 0 sends every
// peer at once, leaving the choice among them to AutoRelay's shuffle.
func WithPace(d time.Duration) SourceOption {
	return func(s *Source) { s.pace = max(0, d) }
}

// WithNumRelays sets how many relays the client holds (default NumRelays):
// AutoRelayOptions passes it to AutoRelay, and the source stops offering
// once the host holds that many.
func WithNumRelays(n int) SourceOption {
	return func(s *Source) { s.want = max(1, n) }
}

// The probes of a paced source (probeRTTs).
const (
	maxProbes    = 8
	probeTimeout = 3 * time.Second
)

// NewSource makes an unbound source.
func NewSource(opts ...SourceOption) *Source {
	s := &Source{pace: DefaultPace, want: NumRelays}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Bind gives the source its host and the selector whose superpeer it
// offers first. Binding again replaces them.
func (s *Source) Bind(h host.Host, sel superpeer.Selector) {
	rtt := s.rtt
	if !s.rttSet && h != nil {
		ps := h.Peerstore()
		rtt = func(p peer.ID) (time.Duration, bool) {
			d := ps.LatencyEWMA(p)
			return d, d > 0
		}
	}
	s.mu.Lock()
	s.h, s.sel, s.rttBound = h, sel, rtt
	s.mu.Unlock()
}

func (s *Source) bound() (host.Host, superpeer.Selector, func(peer.ID) (time.Duration, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h, s.sel, s.rttBound
}

// closed is a channel that offers nothing.
func closed() <-chan peer.AddrInfo {
	ch := make(chan peer.AddrInfo)
	close(ch)
	return ch
}

// PeerSource is the autorelay.PeerSource: the peer's own superpeer first
// (if it is not this peer), then the other peers this host knows that
// speak the hop protocol (proto.ProtoIDv2Hop in the peerstore's protocol
// book), nearest first by RTT (unknown RTTs last, in ID order); at most
// num, each with its peerstore addresses, peers without any skipped.
// Relays held already are not offered again (AutoRelay would pass over
// them), nor anything once the host holds WithNumRelays relays. Before the
// selector's first decision (role Unknown) it offers nothing: AutoRelay
// asks again after MinInterval, and the own superpeer is known by then.
// With WithPace the offers are paced (see Source).
func (s *Source) PeerSource(ctx context.Context, num int) <-chan peer.AddrInfo {
	h, sel, rtt := s.bound()
	if h == nil || sel == nil || num <= 0 || sel.Role() == superpeer.Unknown {
		return closed()
	}
	held := Held(h)
	if s.prune(h, held) {
		// Nothing more this call: AutoRelay forgets the relays as the
		// disconnections reach it, and asks again after MinInterval.
		// (Offers now would have it reserve while it forgets, and its
		// relay finder reads its relays there without their lock:
		// go-libp2p v0.51's relay_finder.go, maybeConnectToRelay.)
		return closed()
	}
	if len(held) >= s.want {
		return closed()
	}
	offers := s.order(h, sel, rtt, num, held)
	if len(offers) == 0 {
		return closed()
	}
	if s.pace == 0 {
		ch := make(chan peer.AddrInfo, len(offers))
		for _, ai := range offers {
			ch <- ai
		}
		close(ch)
		return ch
	}
	// The host's relays as AutoRelay announces them (a stateful event: a
	// subscriber gets the last one at once).
	sub, err := h.EventBus().Subscribe(new(event.EvtAutoRelayAddrsUpdated), eventbus.Name("superpeer relay source"))
	if err != nil {
		sub = nil
	}
	ch := make(chan peer.AddrInfo)
	go func() {
		defer close(ch)
		if sub != nil {
			defer sub.Close()
		}
		holding := map[peer.ID]bool{}
		for _, p := range held {
			holding[p] = true
		}
		var updates <-chan any
		if sub != nil {
			updates = sub.Out()
		}
		take := func(e any) {
			if ev, ok := e.(event.EvtAutoRelayAddrsUpdated); ok {
				holding = map[peer.ID]bool{}
				for _, p := range relaysOf(ev.RelayAddrs) {
					holding[p] = true
				}
			}
		}
		timer := time.NewTimer(s.pace)
		timer.Stop()
		defer timer.Stop()
		for k := 0; k < len(offers); k++ {
			ai := offers[k]
			if k == 1 && !s.rttSet {
				// The first offer (the own superpeer) is out: measure the
				// relays whose RTT is unknown, then offer the rest
				// nearest first.
				probeRTTs(ctx, h, offers[1:], rtt)
				slices.SortStableFunc(offers[1:], nearestFirst(rtt))
				ai = offers[k]
			}
			if len(holding) >= s.want {
				return
			}
			if holding[ai.ID] {
				continue
			}
			select {
			case ch <- ai:
			case <-ctx.Done():
				return
			}
			timer.Reset(s.pace)
		wait:
			for !holding[ai.ID] {
				select {
				case e, ok := <-updates:
					if !ok {
						updates = nil
						continue
					}
					take(e)
				case <-timer.C:
					break wait
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// order is what PeerSource offers, in its order: at most num peers, none
// of those held.
func (s *Source) order(h host.Host, sel superpeer.Selector, rtt func(peer.ID) (time.Duration, bool), num int, held []peer.ID) []peer.AddrInfo {
	ps := h.Peerstore()
	self, own := h.ID(), sel.Superpeer()
	var out []peer.AddrInfo
	if own != "" && own != self && !slices.Contains(held, own) {
		if addrs := ps.Addrs(own); len(addrs) > 0 {
			out = append(out, peer.AddrInfo{ID: own, Addrs: addrs})
		}
	}
	var cands []peer.AddrInfo
	for _, p := range ps.Peers() {
		if p == self || p == own || slices.Contains(held, p) {
			continue
		}
		if hop, err := ps.SupportsProtocols(p, proto.ProtoIDv2Hop); err != nil || len(hop) == 0 {
			continue
		}
		if addrs := ps.Addrs(p); len(addrs) > 0 {
			cands = append(cands, peer.AddrInfo{ID: p, Addrs: addrs})
		}
	}
	slices.SortFunc(cands, nearestFirst(rtt))
	out = append(out, cands...)
	return out[:min(len(out), num)]
}

// nearestFirst orders offers by RTT, known before unknown, then by ID.
func nearestFirst(rtt func(peer.ID) (time.Duration, bool)) func(a, b peer.AddrInfo) int {
	return func(a, b peer.AddrInfo) int {
		da, ka := rtt(a.ID)
		db, kb := rtt(b.ID)
		switch {
		case ka != kb:
			if ka {
				return -1
			}
			return 1
		case ka && da != db:
			return cmp.Compare(da, db)
		}
		return cmp.Compare(a.ID, b.ID)
	}
}

// probeRTTs pings, at once, the offered relays whose RTT is unknown (at
// most maxProbes, each once, within probeTimeout); go-libp2p's ping
// records each RTT in the peerstore, which the default RTT reads. A client
// of a method without coordinates (prefix) knows no RTT to the relays
// otherwise, and "nearest first" would be ID order.
func probeRTTs(ctx context.Context, h host.Host, offers []peer.AddrInfo, rtt func(peer.ID) (time.Duration, bool)) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	n := 0
	for _, ai := range offers {
		if _, ok := rtt(ai.ID); ok || n == maxProbes {
			continue
		}
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.TempAddrTTL)
			select {
			case <-ping.Ping(ctx, h, ai.ID):
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
}

// prune disconnects the held relays that no longer speak the hop protocol
// and reports whether there were any.
func (s *Source) prune(h host.Host, held []peer.ID) bool {
	pruned := false
	for _, p := range held {
		if hop, err := h.Peerstore().SupportsProtocols(p, proto.ProtoIDv2Hop); err == nil && len(hop) == 0 &&
			h.Network().Connectedness(p) == network.Connected {
			_ = h.Network().ClosePeer(p)
			pruned = true
		}
	}
	return pruned
}

// AutoRelayOptions are the options to run AutoRelay with s, for
// libp2p.EnableAutoRelay(relay.AutoRelayOptions(src)...) (nil s: the same
// without the peer source, for EnableAutoRelayWithPeerSource with another
// source, such as RandomSource, under the same settings):
//
//   - WithPeerSource(s.PeerSource);
//   - WithMinCandidates(1) and WithBootDelay(0): AutoRelay reserves with
//     the first candidate the source gives, at once, instead of waiting
//     for 4 candidates or 3 minutes to pick one at random: the source's
//     order is the choice;
//   - WithNumRelays(s's, NumRelays by default: go-libp2p's 2);
//   - WithMinInterval(MinInterval, 5 s): a client gets its superpeer soon
//     after it attached (go-libp2p waits 30 s between two calls);
//   - WithBackoff(Backoff, 1 min, not go-libp2p's hour): a superpeer that
//     refused, full, may have room a minute later, and the source offers it
//     first again.
//
// Options appended after these override them (WithPeerSource aside, which
// AutoRelay takes once).
func AutoRelayOptions(s *Source) []autorelay.Option {
	want := NumRelays
	var opts []autorelay.Option
	if s != nil {
		want = s.want
		opts = append(opts, autorelay.WithPeerSource(s.PeerSource))
	}
	return append(opts,
		autorelay.WithMinCandidates(1),
		autorelay.WithNumRelays(want),
		autorelay.WithMinInterval(MinInterval),
		autorelay.WithBootDelay(0),
		autorelay.WithBackoff(Backoff),
	)
}

// RandomSource is the baseline: AutoRelay's random choice among the peers
// an application knows. Each call takes peers() (for instance the DHT's
// routing table), drops this host, duplicates and peers without peerstore
// addresses, shuffles the rest by rng (in ID order first, so that one seed
// draws the same peers from the same set) and offers at most num, each
// with its peerstore addresses. AutoRelay keeps those that speak the hop
// protocol: peers running Serve, or go-libp2p's relay service
// (libp2p.EnableRelayService(), off by default, started only while AutoNAT
// finds the host public). Safe for concurrent use.
func RandomSource(h host.Host, peers func() []peer.ID, rng *rand.Rand) autorelay.PeerSource {
	var mu sync.Mutex
	return func(ctx context.Context, num int) <-chan peer.AddrInfo {
		ids := slices.Clone(peers())
		slices.Sort(ids)
		ids = slices.Compact(ids)
		ps := h.Peerstore()
		var offers []peer.AddrInfo
		for _, p := range ids {
			if p == h.ID() || p == "" {
				continue
			}
			if addrs := ps.Addrs(p); len(addrs) > 0 {
				offers = append(offers, peer.AddrInfo{ID: p, Addrs: addrs})
			}
		}
		mu.Lock()
		rng.Shuffle(len(offers), func(i, j int) { offers[i], offers[j] = offers[j], offers[i] })
		mu.Unlock()
		offers = offers[:max(0, min(len(offers), num))]
		ch := make(chan peer.AddrInfo, len(offers))
		for _, ai := range offers {
			ch <- ai
		}
		close(ch)
		return ch
	}
}
