package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/relay"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// relaying is `peer run --relay` and `--reachability`: the host's relay
// options, made before the host, and what runs once the node and the
// selector exist.
type relaying struct {
	mode, reach string

	// src is the superpeer source (mode superpeer); random the baseline's
	// (mode random), set by bind.
	src    *relay.Source
	mu     sync.Mutex
	random autorelay.PeerSource
	seed   int64
	svc    *relay.Service
	// pings bounds the /ping requests served at once.
	pings chan struct{}
}

func newRelaying(mode, reach string) (*relaying, error) {
	r := &relaying{mode: mode, reach: reach, pings: make(chan struct{}, 4)}
	if mode == "superpeer" {
		r.src = relay.NewSource()
	}
	return r, nil
}

// hostOptions are the options libp2p.New takes for the mode and the
// reachability.
func (r *relaying) hostOptions() []libp2p.Option {
	var o []libp2p.Option
	switch r.reach {
	case "public":
		o = append(o, libp2p.ForceReachabilityPublic())
	case "private":
		o = append(o, libp2p.ForceReachabilityPrivate())
	}
	switch r.mode {
	case "superpeer":
		// Only superpeers relay, by relay.Serve (go-libp2p runs no relay
		// service unless asked).
		o = append(o, libp2p.EnableAutoRelayWithPeerSource(r.src.PeerSource, relay.AutoRelayOptions(nil)...))
	case "random":
		// go-libp2p's relay service, with its own limits, on every
		// public host; AutoRelay draws candidates from the routing table.
		// The same AutoRelay timing as the superpeer mode: only the
		// choice differs.
		o = append(o, libp2p.EnableRelayService(), libp2p.EnableAutoRelayWithPeerSource(r.randomSource, relay.AutoRelayOptions(nil)...))
	}
	return o
}

// randomSource forwards to the baseline's source once bind made it.
func (r *relaying) randomSource(ctx context.Context, num int) <-chan peer.AddrInfo {
	r.mu.Lock()
	src := r.random
	r.mu.Unlock()
	if src == nil {
		ch := make(chan peer.AddrInfo)
		close(ch)
		return ch
	}
	return src(ctx, num)
}

// bind starts what needs the host, the node and the selector (nil without
// a method): the relay service that follows the role, and the sources.
func (r *relaying) bind(h host.Host, node *dht.Node, sel superpeer.Selector) error {
	switch r.mode {
	case "superpeer":
		r.src.Bind(h, sel)
		svc, err := relay.Serve(h, sel)
		if err != nil {
			return fmt.Errorf("relay service: %w", err)
		}
		r.svc = svc
	case "random":
		// Seeded by the peer's ID: the same identity draws the same
		// candidates in the same order.
		f := fnv.New64a()
		f.Write([]byte(h.ID()))
		r.seed = int64(f.Sum64() >> 1)
		src := relay.RandomSource(h, func() []peer.ID { return node.RoutingTable().ListPeers() }, rand.New(rand.NewSource(r.seed)))
		r.mu.Lock()
		r.random = src
		r.mu.Unlock()
	}
	return nil
}

// Close stops the relay service.
func (r *relaying) Close() error {
	if r.svc != nil {
		return r.svc.Close()
	}
	return nil
}

// relayStatus is /status's relay block.
type relayStatus struct {
	Mode         string `json:"mode"`
	Reachability string `json:"reachability"`
	// Held are the relays this peer holds reservations with (its
	// /p2p-circuit addresses).
	Held []string `json:"held,omitempty"`
	// Seed is the random source's seed (mode random).
	Seed int64 `json:"seed,omitempty"`
	// Serving is this peer's own relay (mode superpeer).
	Serving *relay.ServiceStats `json:"serving,omitempty"`
}

// status is the relay block of /status (nil with --relay off).
func (r *relaying) status(h host.Host) *relayStatus {
	if r == nil || r.mode == "off" {
		return nil
	}
	st := &relayStatus{Mode: r.mode, Reachability: r.reach, Seed: r.seed}
	for _, p := range relay.Held(h) {
		st.Held = append(st.Held, p.String())
	}
	if r.svc != nil {
		s := r.svc.Stats()
		st.Serving = &s
	}
	return st
}

// pingReply is /ping's answer.
type pingReply struct {
	Peer  string    `json:"peer"`
	Via   string    `json:"via,omitempty"`
	RTTms []float64 `json:"rtt_ms,omitempty"`
	Error string    `json:"error,omitempty"`
}

// maxPings is the most pings one /ping request sends.
const maxPings = 20

// pingHandler serves /ping?peer=ID&addr=MULTIADDR[&addr=…][&count=N]: the
// peer connects to ID at those addresses (a relayed connection allowed)
// and pings it N times (default 3, at most maxPings), within 20 s. It is an
// operator's tool on the status address, for measuring paths such as a
// relayed one between two NAT'd peers; at most four run at once.
func (r *relaying) pingHandler(h host.Host) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reply := func(code int, rep pingReply) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(rep)
		}
		q := req.URL.Query()
		id, err := peer.Decode(q.Get("peer"))
		if err != nil {
			reply(http.StatusBadRequest, pingReply{Peer: q.Get("peer"), Error: fmt.Sprintf("peer: %v", err)})
			return
		}
		info := peer.AddrInfo{ID: id}
		for _, s := range q["addr"] {
			a, err := ma.NewMultiaddr(s)
			if err != nil {
				reply(http.StatusBadRequest, pingReply{Peer: id.String(), Error: fmt.Sprintf("addr %q: %v", s, err)})
				return
			}
			info.Addrs = append(info.Addrs, a)
		}
		count := 3
		if c := q.Get("count"); c != "" {
			if count, err = strconv.Atoi(c); err != nil || count < 1 || count > maxPings {
				reply(http.StatusBadRequest, pingReply{Peer: id.String(), Error: fmt.Sprintf("count %q: want 1 … %d", c, maxPings)})
				return
			}
		}
		select {
		case r.pings <- struct{}{}:
			defer func() { <-r.pings }()
		default:
			reply(http.StatusTooManyRequests, pingReply{Peer: id.String(), Error: "busy: four pings already running"})
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
		defer cancel()
		rtts, via, err := relay.Ping(ctx, h, info, count)
		rep := pingReply{Peer: id.String()}
		if via != "" {
			rep.Via = via.String()
		}
		for _, d := range rtts {
			rep.RTTms = append(rep.RTTms, float64(d)/float64(time.Millisecond))
		}
		if err != nil {
			rep.Error = err.Error()
			reply(http.StatusBadGateway, rep)
			return
		}
		reply(http.StatusOK, rep)
	})
}
