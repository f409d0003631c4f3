package swarm

import (
	"cmp"
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// GossipCounter counts the GossipSub RPCs every peer of a swarm sends —
// published messages, forwards and control traffic (IHAVE, IWANT, GRAFT,
// PRUNE) — as a pubsub RawTracer shared by all peers.
type GossipCounter struct {
	RPCs, Messages, Bytes atomic.Uint64
	// Dropped counts RPCs dropped on a full outbound queue, Rejected
	// messages refused by validation (or throttled), Undeliverable messages
	// a slow subscriber missed.
	Dropped, Rejected, Undeliverable atomic.Uint64
}

var _ pubsub.RawTracer = (*GossipCounter)(nil)

func (g *GossipCounter) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	g.RPCs.Add(1)
	g.Messages.Add(uint64(len(rpc.Publish)))
	g.Bytes.Add(uint64(proto.Size(&rpc.RPC)))
}
func (g *GossipCounter) OnNewOutboundStream(peer.ID, protocol.ID)             {}
func (g *GossipCounter) OnClosedOutboundStream(peer.ID)                       {}
func (g *GossipCounter) Join(string)                                          {}
func (g *GossipCounter) Leave(string)                                         {}
func (g *GossipCounter) Graft(peer.ID, string)                                {}
func (g *GossipCounter) Prune(peer.ID, string)                                {}
func (g *GossipCounter) ValidateMessage(*pubsub.Message)                      {}
func (g *GossipCounter) DeliverMessage(*pubsub.Message)                       {}
func (g *GossipCounter) RejectMessage(*pubsub.Message, string)                {}
func (g *GossipCounter) DuplicateMessage(*pubsub.Message)                     {}
func (g *GossipCounter) ThrottlePeer(peer.ID)                                 {}
func (g *GossipCounter) RecvRPC(*pubsub.RPC)                                  {}
func (g *GossipCounter) SendRPCCompleted(*pubsub.RPC, peer.ID, time.Duration) {}
func (g *GossipCounter) DropRPC(*pubsub.RPC, peer.ID)                         {}
func (g *GossipCounter) UndeliverableMessage(*pubsub.Message)                 {}

// RepelNodeOptions are the dht.Node options a swarm that runs the repel
// method needs (Config.NodeOptions): GossipSub, with every peer's sends
// counted in the returned counter.
//
// An announcement is relayed along the mesh only (no flood publishing to
// every topic peer) with a smaller mesh degree than GossipSub's default 6:
// in a swarm each peer is connected to a large part of the others, and
// hundreds of in-process peers relaying every announcement to all of them
// would spend the machine on it.
func RepelNodeOptions() ([]dht.Option, *GossipCounter) {
	g := &GossipCounter{}
	params := pubsub.DefaultGossipSubParams()
	params.D, params.Dlo, params.Dhi, params.Dscore, params.Dout, params.Dlazy = 4, 3, 8, 2, 1, 4
	// Gossip (IHAVE) goes to Dlazy peers a heartbeat, not to a quarter of
	// all topic peers: with 60-90 connections a peer, the default factor
	// sent each peer's IHAVE to 15-20 peers every second, more RPCs than
	// the announcements themselves.
	params.GossipFactor = 0
	return []dht.Option{dht.WithGossipSub(
		pubsub.WithRawTracer(g),
		pubsub.WithFloodPublish(false),
		pubsub.WithGossipSubParams(params),
	)}, g
}

// RepelSwarmConfig is the token method for a swarm whose links carry
// Internet latencies (PlanetLab: RTTs up to a few hundred ms): LocalConfig's
// short timers, except that a move's hand-over (a dial to a peer not yet
// connected, identify, an offer and an ack: several RTTs) gets time to
// finish before the holder gives up — a hand-over that is taken but timed
// out leaves two holders until fencing — decisions wait for gossip to cross the mesh (a few hops of one-way
// latency), and settling outlasts a couple of decisions. Hundreds of
// in-process peers on a loaded machine delay gossip by seconds, so T_dead
// leaves room for several missed announcements (and announcements are
// sparse: every peer verifies the signature of every one): a token re-minted while its
// holder lives beats it (a higher epoch) and restarts its settling.
func RepelSwarmConfig(S int, model repel.Model) repel.Config {
	c := repel.LocalConfig()
	c.Tokens = S
	c.Model = model
	c.MoveInterval = 3 * time.Second
	c.MoveTimeout = 8 * time.Second
	c.MovingAnnounceInterval = 2 * time.Second
	c.AnnounceInterval = 4 * time.Second
	c.SettleAfter = 5 * time.Second
	c.DeadAfter = 20 * time.Second
	// A swarm starts all at once: no token to hear of, so the first mints
	// come after two announcement intervals, not a full T_dead.
	c.JoinWait = 2 * c.AnnounceInterval
	// Views of a live swarm lag (clients re-attach after a token moves,
	// digests follow a round later), so the local search cools faster than
	// in the model's perfect network: the gain a move needs doubles every
	// two moves, and a settled token moves on the coordinates' word only
	// for a 20% gain. What that leaves — a region served from afar that
	// the coordinates misplace, so that no holder sees the gain of moving
	// there — region surveys find by measurement. Chosen by `peer
	// experiment repel-cooling` (experiments/README.md): on a live
	// swarm's timeline in the simulator, cooling as slow as the model's
	// placed better at twice the time to rest, and region surveys placed
	// better still in less.
	c.MinGain = 0.05
	c.SettledMinGain = 0.2
	c.CoolingMoves = 2
	c.RegionSurveys = true
	// Rest buys a move back every 2 min, not LocalConfig's 20 s: every move
	// sends a holder's clients to re-attach and changes the digests the
	// others see, so with 16 tokens on 490 peers the tokens kept passing
	// each other on at the rate rest bought moves back (0.5-1 a second)
	// and the swarm never stood still long enough to converge.
	c.CoolingRest = 2 * time.Minute
	// Matrix latencies tell places apart, unlike LocalConfig's: settled
	// holders survey their places (5 s after settling, then 10, 20, ...;
	// a candidate gets 8 s to measure up to 128 clients). 5 s against
	// 10: as close to the k-median over seeds 1-3 of the default run, in
	// less time (experiments/README.md § the default run).
	c.SurveyInterval = 5 * time.Second
	c.SurveyTimeout = 8 * time.Second
	return c
}

// RepelOptions configure the repel method on a swarm.
type RepelOptions struct {
	// Config is the token method; Tokens is S. Default
	// RepelSwarmConfig(8, repel.Attract).
	Config repel.Config
	// Capacity is C, the most clients a holder serves (0: unbounded).
	Capacity int
	// TTL is the attachment lifetime (0: the attach protocol's default),
	// in the swarm's time: a dilated swarm stretches it.
	TTL time.Duration
	// Attach are further attach options (superpeer.WithDisplace, ...).
	Attach []superpeer.Option
	// Seed seeds the selectors (default the swarm's seed).
	Seed int64
	// Probe is how many holders a client measures before it chooses
	// (repel.WithProbe; 0: the selector's default, 3).
	Probe int
	// Explore is how many more holders, not yet measured, a client
	// measures after an attach step, at most every five renewals
	// (repel.WithExplore; 0: the selector's default, 1; negative: none).
	Explore int
	// ExploreFirst has clients explore at every step while they have
	// measured fewer holders than this (repel.WithExploreFirst; 0: none).
	ExploreFirst int
	// Dissemination is how announcements travel (default repel.Piggyback;
	// repel.GossipSub needs nodes with RepelNodeOptions).
	Dissemination repel.Dissemination
}

// RepelRun is a repel.Selector on every peer of a swarm, over the swarm's
// Vivaldi services.
type RepelRun struct {
	s      *Swarm
	run    *Run // the method's selectors, as sels
	v      *VivaldiRun
	opts   RepelOptions
	sels   []*repel.Selector
	gossip *GossipCounter
	g0     [2]uint64   // gossip messages and bytes at start
	v0     []uint64    // each peer's Vivaldi samples at start
	c0     [][3]uint64 // each peer's raw-key lookup requests sent, failed and called off at start

	lag     lagHistogram // Piggyback: how far behind its holder each peer's news of a token is
	lagStop chan struct{}
	lagDone chan struct{}
}

// StartRepel starts a repel selector on every live peer. With GossipSub
// dissemination the swarm's nodes must run it (RepelNodeOptions); gossip
// may be nil.
func (s *Swarm) StartRepel(ctx context.Context, v *VivaldiRun, opts RepelOptions, gossip *GossipCounter) (*RepelRun, error) {
	if opts.Config.Tokens == 0 {
		opts.Config = RepelSwarmConfig(8, repel.Attract)
	}
	if opts.Seed == 0 {
		opts.Seed = s.cfg.Seed + 11
	}
	r := &RepelRun{s: s, v: v, opts: opts, sels: make([]*repel.Selector, len(s.Peers)), gossip: gossip}
	if gossip != nil {
		r.g0 = [2]uint64{gossip.Messages.Load(), gossip.Bytes.Load()}
	}
	r.v0, r.c0 = make([]uint64, len(s.Peers)), make([][3]uint64, len(s.Peers))
	for _, i := range s.Live() {
		r.v0[i] = v.Service(i).Stats().Samples
		r.c0[i] = r.closestRequests(i)
	}
	// With the swarm dilated every timer runs that much slower (the
	// measured RTTs are divided by it already).
	att := []superpeer.Option{superpeer.WithCapacity(opts.Capacity)}
	if opts.TTL != 0 {
		att = append(att, superpeer.WithTTL(s.Wall(opts.TTL)))
	}
	ropts := []repel.Option{
		repel.WithConfig(opts.Config.Dilated(s.Dilation())),
		repel.WithAttach(append(att, opts.Attach...)...),
		repel.WithDissemination(opts.Dissemination),
	}
	if opts.Probe != 0 {
		ropts = append(ropts, repel.WithProbe(opts.Probe))
	}
	if opts.Explore != 0 {
		ropts = append(ropts, repel.WithExplore(opts.Explore))
	}
	if opts.ExploreFirst != 0 {
		ropts = append(ropts, repel.WithExploreFirst(opts.ExploreFirst))
	}
	run, err := s.StartMethod(ctx, "repel", MethodOptions{
		Env:     superpeer.Env{Options: ropts},
		Seed:    opts.Seed,
		Vivaldi: v,
	})
	if err != nil {
		return nil, err
	}
	r.run = run
	for i, sel := range run.sels {
		if sel != nil {
			r.sels[i] = sel.(*repel.Selector)
		}
	}
	// A held peer's selector is built as it joins (JoinLate), over the
	// Vivaldi service it gets then.
	run.built = func(i int, sel superpeer.Selector) { r.sels[i] = sel.(*repel.Selector) }
	if opts.Dissemination == repel.Piggyback {
		r.lagStop, r.lagDone = make(chan struct{}), make(chan struct{})
		go r.sampleLag()
	}
	return r, nil
}

// lagEvery is how often the swarm reads how far behind their holders the
// peers' news of the tokens is.
const lagEvery = 2 * time.Second

// sampleLag records, every lagEvery until Close, for every live peer and
// every token held by a live peer, how far behind the holder's latest
// announcement the peer's news of it is (lagHistogram).
func (r *RepelRun) sampleLag() {
	defer close(r.lagDone)
	t := time.NewTicker(r.s.Wall(lagEvery))
	defer t.Stop()
	for {
		select {
		case <-r.lagStop:
			return
		case <-t.C:
		}
		r.recordLag(time.Now())
	}
}

// recordLag adds one reading of every peer's lag: for a token whose
// current version the peer knows, the time between the holder's latest
// announcement and the one the peer has heard of; for a token of which
// it knows only an older version, or none, the time since the holder
// took it.
func (r *RepelRun) recordLag(now time.Time) {
	live := r.s.Live()
	cur := map[uint32]repel.Token{}
	known := make([]map[uint32]repel.Token, len(r.sels))
	for _, i := range live {
		sel := r.sels[i]
		if sel == nil {
			continue
		}
		known[i] = map[uint32]repel.Token{}
		for _, v := range sel.KnownVersions() {
			known[i][v.ID] = v
		}
		if t, ok := sel.Held(); ok {
			if v, ok := known[i][t.ID]; ok && v.Holder == t.Holder {
				if c, ok := cur[v.ID]; !ok || v.Beats(c) {
					cur[v.ID] = v
				}
			}
		}
	}
	for _, i := range live {
		if known[i] == nil {
			continue
		}
		for id, c := range cur {
			if c.Holder == string(r.s.Peers[i].ID) {
				continue
			}
			k, ok := known[i][id]
			switch {
			case ok && k.Epoch == c.Epoch && k.Holder == c.Holder:
				r.lag.add(r.s.Network(c.Issued.Sub(k.Issued)))
			case !c.HeldSince.IsZero():
				r.lag.add(r.s.Network(now.Sub(c.HeldSince)))
			}
		}
	}
}

// lagHistogram counts lags in 50 ms bins up to lagMax (the last bin holds
// everything longer).
type lagHistogram struct {
	mu   sync.Mutex
	bins [lagBins + 1]uint64
	n    uint64
}

const (
	lagBin  = 50 * time.Millisecond
	lagBins = 2400 // two minutes
)

func (h *lagHistogram) add(d time.Duration) {
	b := min(max(int(d/lagBin), 0), lagBins)
	h.mu.Lock()
	h.bins[b]++
	h.n++
	h.mu.Unlock()
}

// quantile is the upper edge of the bin holding quantile q, in seconds.
func (h *lagHistogram) quantile(q float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	want := uint64(q*float64(h.n-1)) + 1
	var sum uint64
	for b, c := range h.bins {
		sum += c
		if sum >= want {
			return (time.Duration(b+1) * lagBin).Seconds()
		}
	}
	return (time.Duration(lagBins+1) * lagBin).Seconds()
}

// LagSummary is how far behind their holders the peers' news of the
// tokens was over the run (Piggyback dissemination), read every lagEvery
// for every peer and token: the holder's announcement interval plus the
// time the news takes to spread.
type LagSummary struct {
	P50      float64 `json:"p50"`
	P90      float64 `json:"p90"`
	P99      float64 `json:"p99"`
	Readings uint64  `json:"readings"`
}

// Selector is peer i's selector (nil if it runs none).
func (r *RepelRun) Selector(i int) *repel.Selector { return r.sels[i] }

// Start is when the selectors started.
func (r *RepelRun) Start() time.Time { return r.run.start }

// Config is the token method in use.
func (r *RepelRun) Config() repel.Config { return r.opts.Config }

// RepelState is the swarm's token selection as its live peers see it.
type RepelState struct {
	// Holders lists, per token ID, the live peers that hold it.
	Holders [][]int
	// Superpeers are the live peers whose token settled, sorted.
	Superpeers []int
	// Missing counts tokens nobody live holds; Duplicated, tokens held by
	// more than one, hand-overs in flight aside; HandOvers, tokens whose
	// holder has offered them to a peer that holds them already and awaits
	// the answer (it drops its copy then); Unsettled, holders whose token
	// has not settled; Unsurveyed, with surveys on
	// (repel.Config.SurveyInterval), settled holders whose place no survey
	// has kept yet.
	Missing, Duplicated, HandOvers, Unsettled, Unsurveyed int
	Assignment                                            metrics.Assignment
	// Wrong counts clients attached to a peer that is not a superpeer or
	// does not list them; Unserved, clients attached to nobody.
	Wrong, Unserved int
	// Room is the spare capacity of the superpeers.
	Room int
	// Count is the token count: the fixed repel.Config.Tokens, or with a
	// Fraction the freshest count a live selector holds; Disagree counts
	// the live selectors that hold another, and Retired the holders of
	// tokens at or past Count (not yet told of it).
	Count, Disagree, Retired int
	// Waiting lists the held tokens the selection waits for — unsettled,
	// or settled but unsurveyed — by ID, with the moves on each one's
	// count (repel.Token.Moves).
	Waiting []WaitingToken
}

// WaitingToken is a held token the selection waits for (RepelState.Waiting).
type WaitingToken struct {
	ID      uint32
	Moves   uint32
	Settled bool
}

// countHolders counts, over the holders of each token, the tokens nobody
// holds, those held more than once, and the hand-overs in flight: a holder
// that offered its token and awaits the answer while the peer it offered it
// to holds exactly the offered version is the one peer handing it on, not a
// second holder (the move protocol's old holder keeps its copy until the
// ack).
func countHolders(holders [][]int, held func(i int) repel.Token, offer func(i int) (repel.Token, bool)) (missing, duplicated, handOvers int) {
	for _, hs := range holders {
		owners := len(hs)
		for _, i := range hs {
			o, ok := offer(i)
			if !ok {
				continue
			}
			for _, j := range hs {
				if t := held(j); j != i && t.Holder == o.Holder && t.Epoch == o.Epoch && t.ID == o.ID {
					owners--
					handOvers++
					break
				}
			}
		}
		switch {
		case len(hs) == 0:
			missing++
		case owners > 1:
			duplicated++
		}
	}
	return missing, duplicated, handOvers
}

// TokensBack is true when every token is held by exactly one live peer.
func (st RepelState) TokensBack() bool {
	return st.Missing == 0 && st.Duplicated == 0 && st.Disagree == 0 && st.Retired == 0
}

// Converged is true when every token is held once and settled — exactly S
// superpeers — with its place kept by a survey (with surveys on), and every
// client is attached to one that lists it (or capacity has run out).
func (st RepelState) Converged() bool { return st.ConvergedWithin(0) }

// ConvergedWithin is Converged with up to transit clients in transit.
func (st RepelState) ConvergedWithin(transit int) bool {
	return st.TokensBack() && st.Unsettled == 0 && st.Unsurveyed == 0 && len(st.Superpeers) == len(st.Holders) &&
		st.InTransit() <= transit
}

// InTransit counts the clients between holders: attached to a peer that
// does not list them (Wrong), or unserved while some holder has room.
func (st RepelState) InTransit() int {
	if st.Room == 0 {
		return st.Wrong
	}
	return st.Wrong + st.Unserved
}

// State reads every live selector.
func (r *RepelRun) State() RepelState {
	live := r.s.Live()
	S, disagree := r.count(live)
	capacity := r.opts.Capacity
	st := RepelState{Holders: make([][]int, S), Assignment: make(metrics.Assignment, len(r.s.Peers)), Count: S, Disagree: disagree}
	for i := range st.Assignment {
		st.Assignment[i] = metrics.Unassigned
	}
	isSP := map[int]bool{}
	clients := map[int]map[peer.ID]bool{}
	for _, i := range live {
		sel := r.sels[i]
		if sel == nil {
			continue
		}
		if t, ok := sel.Held(); ok {
			if int(t.ID) >= S {
				st.Retired++
				continue
			}
			st.Holders[t.ID] = append(st.Holders[t.ID], i)
			if sel.Role() == superpeer.Superpeer {
				st.Superpeers = append(st.Superpeers, i)
				isSP[i] = true
				if r.opts.Config.SurveyInterval > 0 && !sel.Surveyed() {
					st.Unsurveyed++
					st.Waiting = append(st.Waiting, WaitingToken{ID: t.ID, Moves: t.Moves, Settled: true})
				}
				st.Assignment[i] = i
				set := map[peer.ID]bool{}
				for _, c := range sel.Attach().Clients() {
					set[c] = true
				}
				clients[i] = set
				if capacity > 0 {
					st.Room += max(0, capacity-len(set))
				}
			} else {
				st.Unsettled++
				st.Waiting = append(st.Waiting, WaitingToken{ID: t.ID, Moves: t.Moves})
			}
		}
	}
	if capacity == 0 {
		st.Room = len(r.s.Peers)
	}
	held := func(i int) repel.Token { t, _ := r.sels[i].Held(); return t }
	offer := func(i int) (repel.Token, bool) { return r.sels[i].Offer() }
	st.Missing, st.Duplicated, st.HandOvers = countHolders(st.Holders, held, offer)
	for _, i := range live {
		sel := r.sels[i]
		if sel == nil || isSP[i] {
			continue
		}
		if _, ok := sel.Held(); ok {
			continue // an unsettled holder, counted above
		}
		sp := sel.Superpeer()
		if sp == "" {
			st.Unserved++
			continue
		}
		j := r.s.Index(sp)
		if j < 0 || !isSP[j] || !clients[j][r.s.Peers[i].ID] {
			st.Wrong++
			continue
		}
		st.Assignment[i] = j
	}
	sort.Ints(st.Superpeers)
	slices.SortFunc(st.Waiting, func(a, b WaitingToken) int { return cmp.Compare(a.ID, b.ID) })
	return st
}

// Wait polls the selection until cond holds, and returns how long that took
// from since, in the network's time (Swarm.Elapsed). It reads the state
// every waitPoll of the network's time: a dilated swarm is read no more
// often per network second than one that is not (a reading visits every
// peer, and at ×8 a wall-clock poll read 2 000 peers every 6 ms of
// network time).
func (r *RepelRun) Wait(ctx context.Context, since time.Time, cond func(RepelState) bool) (time.Duration, error) {
	tick := time.NewTicker(time.Duration(float64(waitPoll) * r.s.Dilation()))
	defer tick.Stop()
	logged := time.Now()
	for {
		st := r.State()
		r.s.progress("select", len(r.s.Live())-st.Wrong-st.Unserved-st.Unsettled, len(r.s.Live()))
		if cond(st) {
			return r.s.Elapsed(since), nil
		}
		if time.Since(logged) >= stateLogEvery {
			logged = time.Now()
			stats, _ := r.counts()
			r.s.logf("repel at %.0f s: %s; so far %d minted (%d lookups, %d failed), %d moved, %d move timeouts, %d fenced, %d settled",
				r.s.Elapsed(since).Seconds(), st, stats[repel.EventMinted.String()], stats["token_lookups"], stats["token_lookup_failures"],
				stats[repel.EventMovedAway.String()], stats[repel.EventMoveTimedOut.String()], stats[repel.EventFenced.String()], stats[repel.EventSettled.String()])
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("swarm: repel not converged: %s: %w", st, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitPoll is how often, in the network's time, Wait reads the state.
const waitPoll = 50 * time.Millisecond

// stateLogEvery is how often a wait for convergence logs the state.
const stateLogEvery = 15 * time.Second

// String says what keeps the state from converging.
func (st RepelState) String() string {
	s := fmt.Sprintf("%d missing, %d duplicated (+%d handed over), %d unsettled, %d unsurveyed, %d superpeers, %d wrong, %d unserved (room %d)",
		st.Missing, st.Duplicated, st.HandOvers, st.Unsettled, st.Unsurveyed, len(st.Superpeers), st.Wrong, st.Unserved, st.Room)
	if len(st.Waiting) > 0 && len(st.Waiting) <= maxWaitingShown {
		var b strings.Builder
		for i, w := range st.Waiting {
			if i > 0 {
				b.WriteString(", ")
			}
			state := "unsurveyed"
			if !w.Settled {
				state = "unsettled"
			}
			fmt.Fprintf(&b, "token %d %s after %d moves", w.ID, state, w.Moves)
		}
		s += "; waiting on " + b.String()
	}
	return s
}

// maxWaitingShown is the most waiting tokens RepelState.String names: the
// tail of a selection, not its start.
const maxWaitingShown = 6

// WaitConverged waits until RepelState.Converged.
func (r *RepelRun) WaitConverged(ctx context.Context, since time.Time) (time.Duration, error) {
	return r.Wait(ctx, since, RepelState.Converged)
}

// Rest is how a selection came to rest (RepelRun.WaitAtRest).
type Rest struct {
	// At is when the resting state began and First when the selection
	// first converged (within the transit allowance), from the wait's
	// since, in the network's time.
	At, First time.Duration
	// Moved counts the clients served by another holder at the end of the
	// rest than at its start; InTransitMax is the most clients in transit
	// (RepelState.InTransit) at any reading of the rest, InTransitEnd at its
	// last.
	Moved, InTransitMax, InTransitEnd int
}

// WaitAtRest waits until the selection is converged and at rest: at every
// reading for rest of the network's time without a break, every token held
// once by the same holder, settled and surveyed, and every client served
// by a holder that lists it but at most transit of them
// (RepelState.ConvergedWithin). A first convergence is one moment's
// consistency: clients displaced or left by a token's move just before it
// are served, but by whichever holder had room, and move to a nearer one
// at their next step (within one renewal). Choose rest of at least one
// renewal interval (the attach TTL's third) so that every client has
// stepped on what it knows; the simulator likewise scores the tokens once
// quiet (sim.RepelOptions.Quiet).
//
// Clients may move from one holder that lists them to a nearer one during
// the rest; they are counted, not waited for: at 2 000 peers some client
// does so every few seconds. With transit > 0 a few clients may also be
// between holders (displaced, or asking a holder that has not yet listed
// them) at each reading: at 2 000 peers some client always is, and a rest
// that allowed none never came. Scored at the end of the rest, such a
// client counts as unserved.
func (r *RepelRun) WaitAtRest(ctx context.Context, since time.Time, rest time.Duration, transit int) (Rest, error) {
	w := restWatch{period: rest, transit: transit}
	_, err := r.Wait(ctx, since, func(st RepelState) bool { return w.see(st, r.s.Elapsed(since)) })
	return w.Rest, err
}

// restWatch follows a selection's states, read at network times now (from
// a common origin, non-decreasing), until it has been converged, with at
// most transit clients in transit at each reading, with the same token
// holders for period. Its Rest says how, so far.
type restWatch struct {
	Rest
	period  time.Duration
	transit int
	start   RepelState // the state the rest began with
	resting bool       // converged at every reading since At, the same token holders as start
	seen    bool
}

// see takes the state at now and says whether the selection has rested.
func (w *restWatch) see(st RepelState, now time.Duration) bool {
	if !st.ConvergedWithin(w.transit) {
		w.resting = false
		return false
	}
	if !w.seen {
		w.seen, w.First = true, now
	}
	if !w.resting || !sameTokens(w.start, st) {
		w.start, w.resting, w.At, w.InTransitMax = st, true, now, 0
	}
	w.InTransitEnd = st.InTransit()
	w.InTransitMax = max(w.InTransitMax, w.InTransitEnd)
	w.Moved = 0
	for i, sp := range st.Assignment {
		if i < len(w.start.Assignment) && w.start.Assignment[i] != sp {
			w.Moved++
		}
	}
	return now-w.At >= w.period
}

// sameTokens is true when a and b have the same holders of every token
// and the same superpeers.
func sameTokens(a, b RepelState) bool {
	return slices.EqualFunc(a.Holders, b.Holders, slices.Equal) && slices.Equal(a.Superpeers, b.Superpeers)
}

// RepelSummary is the `repel` block of the swarm report: what the tokens
// did and what it cost.
type RepelSummary struct {
	Force string `json:"force"`
	// SettleSeconds is from the start of selection until every token was
	// held once and settled and every client attached.
	SettleSeconds float64 `json:"settle_seconds"`
	// Moves is how many hand-overs the tokens made; Minted, how many times
	// a token was minted (S at start, more after deaths); Fenced, how many
	// duplicate holders dropped their copy.
	Moves  uint64 `json:"moves"`
	Minted uint64 `json:"minted"`
	Fenced uint64 `json:"fenced"`
	// Lookups counts the lookups of silent tokens' names (who mints
	// them), LookupFailures those that ended in an error.
	// LookupRequests, LookupRequestFailures and LookupRequestsCalledOff
	// are the raw-key lookup's requests swarm-wide since selection
	// started (dht.Stats ClosestSent, ClosestFailed, ClosestCancelled): a
	// failed request to the peer nearest a name makes its lookup name
	// another; a called-off one was still out, to a farther peer, when its
	// lookup had the answer.
	Lookups                 uint64 `json:"lookups"`
	LookupFailures          uint64 `json:"lookup_failures"`
	LookupRequests          uint64 `json:"lookup_requests"`
	LookupRequestFailures   uint64 `json:"lookup_request_failures"`
	LookupRequestsCalledOff uint64 `json:"lookup_requests_called_off"`
	// Proposals counts the census's proposals of a new count
	// (repel.Config.Fraction; every holder that proposed, so one change
	// of S can count several); Retired, the tokens holders dropped for a
	// smaller count.
	Proposals uint64 `json:"proposals"`
	Retired   uint64 `json:"retired"`
	// Guard is repel.Config.Guard; Untraced counts the fresher versions
	// peers refused as not handed over by a live holder, Reverted the
	// times a peer went back to a holder that said it still holds.
	Guard    bool   `json:"guard"`
	Untraced uint64 `json:"untraced"`
	Reverted uint64 `json:"reverted"`
	// RefusedFull counts attach requests a full holder refused; Displaced,
	// clients a full holder dropped for a newcomer that loses more without
	// it (superpeer.WithDisplace), since selection started; Told, the
	// displaced clients that heard so from their holder at once.
	RefusedFull uint64 `json:"refused_full"`
	Displaced   uint64 `json:"displaced"`
	Told        uint64 `json:"displaced_told"`
	// Surveys counts the settled holders' surveys (repel.Config.SurveyInterval);
	// SurveyMoves, those that handed the token to a place measured better;
	// RegionMoves, the region surveys (repel.Config.RegionSurveys) that
	// handed it to a region served from afar; SurveyKept, those that kept
	// it.
	Surveys     uint64 `json:"surveys"`
	SurveyMoves uint64 `json:"survey_moves"`
	RegionMoves uint64 `json:"region_moves"`
	SurveyKept  uint64 `json:"survey_kept"`
	// CoordMisfits counts the clients holders left out of their token's
	// placement while their coordinates put them much farther than the
	// holder measured them (repel.Config.CoordCheck, EventCoordMisfit).
	CoordMisfits uint64 `json:"coord_misfits"`
	// Dissemination is how announcements travelled: "piggyback" on the
	// Vivaldi exchanges (with direct announcements between holders) or
	// "gossipsub".
	Dissemination string `json:"dissemination"`
	// GossipMessages and GossipBytes are what dissemination sent,
	// swarm-wide, since selection started: with GossipSub every RPC
	// (forwards and the control traffic), with Piggyback every non-empty
	// piggyback and direct announcement.
	GossipMessages uint64 `json:"gossip_messages"`
	GossipBytes    uint64 `json:"gossip_bytes"`
	// LagSeconds is, with Piggyback, how far behind their holders the
	// peers' news of the tokens was (LagSummary).
	LagSeconds *LagSummary `json:"lag_seconds,omitempty"`
	// Drops are refused announcements and frames, by reason.
	Drops map[string]uint64 `json:"drops,omitempty"`
}

// closestRequests is peer i's raw-key lookup requests sent, failed and
// called off.
func (r *RepelRun) closestRequests(i int) [3]uint64 {
	if p := r.s.Peers[i]; p.Node != nil {
		st := p.Node.Stats()
		return [3]uint64{st.ClosestSent.Load(), st.ClosestFailed.Load(), st.ClosestCancelled.Load()}
	}
	return [3]uint64{}
}

// counts sums the live selectors' counters.
func (r *RepelRun) counts() (stats, drops map[string]uint64) {
	stats, drops = map[string]uint64{}, map[string]uint64{}
	for _, i := range r.s.Live() {
		if sel := r.sels[i]; sel != nil {
			for k, v := range sel.Stats() {
				stats[k] += v
			}
			for k, v := range sel.Drops() {
				drops[k] += v
			}
		}
	}
	return stats, drops
}

// count is the token count of the live selectors: the fixed Tokens, or
// under a Fraction the freshest count any holds, and how many hold another.
func (r *RepelRun) count(live []int) (S, disagree int) {
	if r.opts.Config.Fraction == 0 {
		return r.opts.Config.Tokens, 0
	}
	var best repel.Count
	var counts []repel.Count
	for _, i := range live {
		if sel := r.sels[i]; sel != nil {
			c := sel.Count()
			counts = append(counts, c)
			if c.Version > best.Version || c.Version == best.Version && c.S > best.S {
				best = c
			}
		}
	}
	for _, c := range counts {
		if c.S != best.S || c.Version != best.Version {
			disagree++
		}
	}
	return max(best.S, 1), disagree
}

// Summary scores the current selection as the prefix method's Summary does
// (method "repel"), and reports the tokens' own figures.
func (r *RepelRun) Summary(converge time.Duration, rng *rand.Rand) (SelectionSummary, RepelSummary, error) {
	st := r.State()
	S := st.Count
	capacity := r.opts.Capacity
	live := r.s.Live()
	stats, drops := r.counts()
	rs := RepelSummary{
		Force:          r.opts.Config.Model.String(),
		SettleSeconds:  converge.Seconds(),
		Moves:          stats[repel.EventAccepted.String()],
		Minted:         stats[repel.EventMinted.String()],
		Fenced:         stats[repel.EventFenced.String()],
		Lookups:        stats["token_lookups"],
		LookupFailures: stats["token_lookup_failures"],
		Proposals:      stats[repel.EventCounted.String()],
		Retired:        stats[repel.EventRetired.String()],
		Guard:          r.opts.Config.Guard,
		Untraced:       stats[repel.EventUntraced.String()],
		Reverted:       stats[repel.EventReverted.String()],
		Surveys:        stats[repel.EventSurvey.String()],
		SurveyMoves:    stats[repel.EventSurveyMoved.String()],
		RegionMoves:    stats[repel.EventRegionMoved.String()],
		SurveyKept:     stats[repel.EventSurveyKept.String()],
		CoordMisfits:   stats[repel.EventCoordMisfit.String()],
		Drops:          drops,
		Dissemination:  r.opts.Dissemination.String(),
	}
	sum, err := r.s.summarize("repel", st.Assignment, st.Superpeers, st.Unserved, st.Wrong, S, capacity, converge, r.run.start, r.run.t0, rng)
	if err != nil {
		return sum, rs, err
	}
	secs := r.s.Elapsed(r.run.start).Seconds()
	per := func(x uint64) float64 { return float64(x) / float64(max(len(live), 1)) / secs }
	var samples uint64
	for _, i := range live {
		c := r.closestRequests(i)
		rs.LookupRequests += c[0] - r.c0[i][0]
		rs.LookupRequestFailures += c[1] - r.c0[i][1]
		rs.LookupRequestsCalledOff += c[2] - r.c0[i][2]
		if sel := r.sels[i]; sel != nil {
			rs.RefusedFull += sel.Attach().Stats.RefusedFull.Load()
			rs.Displaced += sel.Attach().Stats.Displaced.Load()
			rs.Told += sel.Attach().Stats.Heard.Load()
			// Since selection started: the coordinate wait before it
			// is not the selection's.
			samples += sel.Vivaldi().Stats().Samples - r.v0[i]
		}
	}
	for k, v := range map[string]float64{
		"announce_sent":   per(stats["announce_sent"]),
		"announce_bytes":  per(stats["announce_bytes"]),
		"move_frames":     per(stats["move_frames_sent"]),
		"move_bytes":      per(stats["move_bytes"]),
		"survey_frames":   per(stats["survey_frames_sent"]),
		"survey_bytes":    per(stats["survey_bytes"]),
		"holder_probes":   per(stats["holder_probes"]),
		"client_explored": per(stats["client_explored"]),
		"vivaldi_samples": per(samples),
	} {
		sum.PerPeerPerSecond[k] = v
	}
	switch {
	case r.opts.Dissemination == repel.Piggyback:
		rs.GossipMessages = stats["gossip_piggybacks"] + stats["announce_sent"]
		rs.GossipBytes = stats["gossip_piggyback_bytes"] + stats["announce_bytes"]
		rs.LagSeconds = &LagSummary{P50: r.lag.quantile(0.5), P90: r.lag.quantile(0.9), P99: r.lag.quantile(0.99), Readings: r.lag.n}
	case r.gossip != nil:
		rs.GossipMessages = r.gossip.Messages.Load() - r.g0[0]
		rs.GossipBytes = r.gossip.Bytes.Load() - r.g0[1]
	}
	sum.PerPeerPerSecond["gossip_messages"] = per(rs.GossipMessages)
	sum.PerPeerPerSecond["gossip_bytes"] = per(rs.GossipBytes)
	return sum, rs, nil
}

// PickKill chooses a fraction of the live peers at random that includes at
// least holderFraction of the current token holders.
func (r *RepelRun) PickKill(fraction, holderFraction float64, rng *rand.Rand) []int {
	live := r.s.Live()
	rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
	n := int(fraction*float64(len(live)) + 0.5)
	var holders, others []int
	for _, i := range live {
		if _, ok := r.sels[i].Held(); ok {
			holders = append(holders, i)
		} else {
			others = append(others, i)
		}
	}
	h := int(holderFraction*float64(len(holders)) + 0.999)
	h = min(h, len(holders))
	chosen := append([]int(nil), holders[:h]...)
	rest := append(others, holders[h:]...)
	rng.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
	for _, i := range rest {
		if len(chosen) >= n {
			break
		}
		chosen = append(chosen, i)
	}
	sort.Ints(chosen)
	return chosen
}

// Kill crashes the given peers: selector, Vivaldi service, DHT node and
// host.
func (r *RepelRun) Kill(idx []int) { r.run.Kill(idx) }

// Close stops every selector (the swarm and the Vivaldi services stay up).
func (r *RepelRun) Close() {
	if r.lagStop != nil {
		close(r.lagStop)
		<-r.lagDone
		r.lagStop = nil
	}
	if r.run != nil {
		r.run.Close()
	}
}
