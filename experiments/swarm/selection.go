package swarm

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// PrefixSpreadPerPeer is StartPrefix's default start spread per peer,
// chosen by `peer swarm --method prefix --vivaldi=false --n 2000
// --start-spread D` (experiments/README.md, "10 000 prefix peers"): 10 ms
// a peer converged sooner than 20 ms on both seeds tried, 1 ms made lookups
// time out and repeat.
const PrefixSpreadPerPeer = 10 * time.Millisecond

// The attachment lifetime peer swarm gives its selectors unless told
// (TTLFor): 9 s up to TTLScaleAbove peers, TTLPerPeer a peer above. A
// client renews every TTL/3, so one process running n peers renews
// n/(TTL/3) attachments a second, a stream each: 3 333 a second at
// 10 000 peers and 9 s, more than this project's 2-core machine serves
// beside the lookups, and the leases that lapsed while it fell behind sent
// their clients into more lookups and requests (experiments/README.md,
// "10 000 prefix peers"). Above 2 000 peers the rate stays at 667 a
// second, as VivaldiWarmInterval keeps the samples to 800.
const (
	TTLScaleAbove = 2000
	TTLPerPeer    = 4500 * time.Microsecond
)

// TTLFor is the attachment lifetime for a swarm of n peers: 9 s, or
// n × TTLPerPeer above TTLScaleAbove peers.
func TTLFor(n int) time.Duration {
	const base = 9 * time.Second
	if n <= TTLScaleAbove {
		return base
	}
	return max(base, time.Duration(n)*TTLPerPeer)
}

// StartPrefix runs the prefix selector on every live peer (the registered
// method "prefix" through StartMethod). Unless opts say otherwise
// (superpeer.WithStartSpread), the first lookups of the n peers are spread
// over n × PrefixSpreadPerPeer (at least one second): all of them start at
// once here, which no real network does, and a burst beyond what the
// machine answers only makes lookups time out and repeat.
// Held peers count: the spread also paces the lookups of a failed
// superpeer's clients, and the swarm may grow to all its peers (Grow).
func (s *Swarm) StartPrefix(ctx context.Context, opts ...superpeer.Option) error {
	spread := superpeer.WithStartSpread(max(time.Second, time.Duration(len(s.Peers))*PrefixSpreadPerPeer))
	opts = append([]superpeer.Option{spread}, opts...)
	_, err := s.StartMethod(ctx, "prefix", MethodOptions{Env: superpeer.Env{Options: opts}})
	return err
}

// Selector is peer i's prefix selector (nil unless StartPrefix runs).
func (s *Swarm) Selector(i int) *superpeer.PrefixSelector {
	if s.active == nil {
		return nil
	}
	p, _ := s.active.sels[i].(*superpeer.PrefixSelector)
	return p
}

// prefixSelector is any live peer's prefix selector, for the scheme and
// capacity they share.
func (s *Swarm) prefixSelector() *superpeer.PrefixSelector {
	for _, p := range s.Local() {
		if s.live(p.Index) {
			if sel := s.Selector(p.Index); sel != nil {
				return sel
			}
		}
	}
	return nil
}

// live is whether peer i is neither killed nor held back.
func (s *Swarm) live(i int) bool { return !s.dead[i].Load() && !s.held[i].Load() }

// Live lists the indices of the peers that have not been killed.
func (s *Swarm) Live() []int {
	out := make([]int, 0, s.cfg.To-s.cfg.From)
	for _, p := range s.Local() {
		if s.live(p.Index) {
			out = append(out, p.Index)
		}
	}
	return out
}

// Everyone lists the live peers here and every remote peer (another
// process's, taken to be up): whom all keys count.
func (s *Swarm) Everyone() []int {
	if s.cfg.From == 0 && s.cfg.To == len(s.Peers) {
		return s.Live()
	}
	var out []int
	for i, p := range s.Peers {
		if p.Remote || s.live(i) {
			out = append(out, i)
		}
	}
	return out
}

// ExpectedSuperpeers is, from all live peers' keys, the superpeer of every
// occupied group: the member XOR-closest to the group key.
func (s *Swarm) ExpectedSuperpeers(scheme superpeer.Prefix) map[int]int {
	return scheme.Superpeers(s.Everyone(), func(i int) dht.Key { return s.Peers[i].Key })
}

// PrefixState is the swarm's selection as its peers see it, checked against
// what all keys say it must be.
type PrefixState struct {
	Superpeers []int // peers that believe they are superpeers, sorted
	Expected   []int // the superpeers all keys call for, sorted
	Assignment metrics.Assignment
	// Wrong counts peers whose belief differs from the expected set, clients
	// attached to someone who does not list them, and clients away from
	// their group's superpeer while it has room.
	Wrong int
	// Unserved counts clients served by nobody.
	Unserved int
	// Room is the spare capacity of the expected superpeers: places not
	// taken by a client that believes it is attached there.
	Room int
	// Examples describes the first few wrong peers.
	Examples []string
	// Kinds counts the wrong peers by kind: "false superpeer", "missing
	// superpeer", "attached wrong", "away with room".
	Kinds map[string]int
}

func (st *PrefixState) wrong(kind, format string, args ...any) {
	st.Wrong++
	if st.Kinds == nil {
		st.Kinds = map[string]int{}
	}
	st.Kinds[kind]++
	if len(st.Examples) < 3 {
		st.Examples = append(st.Examples, fmt.Sprintf(format, args...))
	}
}

// Converged is true when every peer's role is right, every client is
// attached to a superpeer that lists it (its group's, unless full), and no
// client is unserved while capacity remains.
func (st PrefixState) Converged() bool {
	return st.Wrong == 0 && (st.Unserved == 0 || st.Room == 0)
}

// PrefixState reads every live selector and checks it.
func (s *Swarm) PrefixState() PrefixState {
	scheme := s.prefixSelector().Scheme()
	capacity := s.prefixSelector().Attach().Capacity()
	expected := s.ExpectedSuperpeers(scheme)
	isExpected := map[int]bool{}
	var st PrefixState
	for _, i := range expected {
		isExpected[i] = true
		st.Expected = append(st.Expected, i)
	}
	sort.Ints(st.Expected)
	st.Assignment = make(metrics.Assignment, len(s.Peers))
	for i := range st.Assignment {
		st.Assignment[i] = metrics.Unassigned
	}
	clients := map[int]map[peer.ID]bool{}
	for _, i := range st.Expected {
		if s.Peers[i].Remote {
			continue // its list is another process's to check
		}
		set := map[peer.ID]bool{}
		for _, c := range s.Selector(i).Attach().Clients() {
			set[c] = true
		}
		clients[i] = set
	}
	served := map[int]int{}
	for _, i := range s.Live() {
		sel := s.Selector(i)
		if sc := sel.Scheme(); sc != scheme {
			// With superpeer.WithFraction the peers must agree on S too.
			st.wrong("other count", "peer %d holds S = %d, not %d", i, sc.Groups(), scheme.Groups())
			continue
		}
		role, sp := sel.Role(), sel.Superpeer()
		if role == superpeer.Superpeer {
			st.Superpeers = append(st.Superpeers, i)
			st.Assignment[i] = i
			if !isExpected[i] {
				st.wrong("false superpeer", "peer %d believes it is a superpeer", i)
			}
			continue
		}
		if isExpected[i] {
			st.wrong("missing superpeer", "peer %d should be a superpeer", i)
			continue
		}
		if sp == "" {
			st.Unserved++
			continue
		}
		j := s.Index(sp)
		lists := j >= 0 && (s.Peers[j].Remote || clients[j][s.Peers[i].ID])
		if j < 0 || !isExpected[j] || !lists {
			st.wrong("attached wrong", "peer %d is attached to %d (a superpeer: %v; lists it: %v)", i, j, j >= 0 && isExpected[j], lists)
			continue
		}
		st.Assignment[i] = j
		served[j]++
		home := expected[scheme.Group(s.Peers[i].Key)]
		if j != home && !s.Peers[home].Remote && (capacity == 0 || len(clients[home]) < capacity) {
			st.wrong("away with room", "peer %d is served by %d away from its group's superpeer %d, which has room", i, j, home)
		}
	}
	st.Room = s.room(st.Expected, served, capacity)
	return st
}

// WaitPrefix polls the selection until it has converged, and returns how
// long that took from since.
func (s *Swarm) WaitPrefix(ctx context.Context, since time.Time) (time.Duration, error) {
	tick := time.NewTicker(s.pollEvery())
	defer tick.Stop()
	logged := time.Now()
	lookups, requests := s.prefixTraffic()
	for {
		st := s.PrefixState()
		live := len(s.Live())
		s.progress("select", live-st.Wrong-st.Unserved, live)
		if st.Converged() {
			return time.Since(since), nil
		}
		if dt := time.Since(logged); dt >= stateLogEvery {
			// What keeps it from converging, by kind, as repel's Wait
			// says, and the selectors' traffic since the last line.
			logged = time.Now()
			l, r := s.prefixTraffic()
			s.logf("prefix at %.0f s: %d wrong %v, %d unserved (room %d); %.0f lookups/s, %.0f attach requests/s",
				time.Since(since).Seconds(), st.Wrong, st.Kinds, st.Unserved, st.Room,
				float64(l-lookups)/dt.Seconds(), float64(r-requests)/dt.Seconds())
			lookups, requests = l, r
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("swarm: selection not converged: %d wrong %v %q, %d unserved (room %d): %w", st.Wrong, st.Kinds, st.Examples, st.Unserved, st.Room, ctx.Err())
		case <-tick.C:
		}
	}
}

// pollEvery is how often WaitPrefix reads the selection: every 100 ms, or
// n × 50 µs above 2 000 peers: at 10 000 peers ten readings a second made
// about 7 MB of garbage a second, 6% of the process's allocation.
func (s *Swarm) pollEvery() time.Duration {
	return max(100*time.Millisecond, time.Duration(len(s.Peers))*50*time.Microsecond)
}

// prefixTraffic is the lookups and attach requests (renewals included) the
// live prefix selectors here have made so far.
func (s *Swarm) prefixTraffic() (lookups, requests uint64) {
	for _, i := range s.Live() {
		if sel := s.Selector(i); sel != nil {
			lookups += sel.Lookups()
			requests += sel.Attach().Stats.Sent.Load()
		}
	}
	return lookups, requests
}

// SelectionStart is when the running method's selectors started.
func (s *Swarm) SelectionStart() time.Time {
	if s.active == nil {
		return time.Time{}
	}
	return s.active.start
}

// Kill stops the given peers at once: selector, DHT node and host, and cuts
// their links, as a crash would.
func (s *Swarm) Kill(idx []int) {
	var wg sync.WaitGroup
	for _, i := range idx {
		if s.dead[i].Load() || s.Peers[i].Remote {
			continue
		}
		s.dead[i].Store(true)
		s.link.kill(s.Peers[i].ID)
		wg.Add(1)
		go func(p *Peer) {
			defer wg.Done()
			if sel := s.activeSelector(p.Index); sel != nil {
				sel.Close()
			}
			p.Node.Close()
			p.Host.Close()
		}(s.Peers[i])
	}
	wg.Wait()
}

// PickKill chooses a fraction of the live peers at random, plus (with
// superpeers) every current superpeer of the running method.
func (s *Swarm) PickKill(fraction float64, superpeers bool, rng *rand.Rand) []int {
	return s.active.PickKill(fraction, superpeers, rng)
}

// activeSelector is peer i's selector of the running method, if any.
func (s *Swarm) activeSelector(i int) superpeer.Selector {
	if s.active == nil {
		return nil
	}
	return s.active.sels[i]
}

// liveRTT is the RTT space restricted to live peers, with the index maps.
type liveRTT struct {
	s    *Swarm
	idx  []int       // live index → swarm index
	back map[int]int // swarm index → live index
}

func (s *Swarm) liveSpace() *liveRTT {
	l := &liveRTT{s: s, idx: s.Live(), back: map[int]int{}}
	for k, i := range l.idx {
		l.back[i] = k
	}
	return l
}

func (l *liveRTT) Len() int { return len(l.idx) }

// local maps swarm indices to the live space's, leaving out the dead.
func (l *liveRTT) local(idx []int) []int {
	out := make([]int, 0, len(idx))
	for _, i := range idx {
		if j, ok := l.back[i]; ok {
			out = append(out, j)
		}
	}
	return out
}
func (l *liveRTT) RTT(i, j int) float64 { return l.s.RTT(l.idx[i], l.idx[j]) }

// Evaluate scores an assignment over the live peers with Lo et al.'s
// requirements, against the true RTTs.
func (s *Swarm) Evaluate(a metrics.Assignment, sps []int, capacity, target int) (metrics.Evaluation, error) {
	l := s.liveSpace()
	la := make(metrics.Assignment, l.Len())
	for k, i := range l.idx {
		la[k] = metrics.Unassigned
		if a[i] >= 0 {
			if j, ok := l.back[a[i]]; ok {
				la[k] = j
			}
		}
	}
	ev, err := metrics.Evaluate(l, la, l.local(sps), capacity)
	if err != nil {
		return ev, err
	}
	ev.SetTarget(target)
	return ev, nil
}

// idealAttach scores the live ones among sps with every other live peer
// assigned as the baselines are (metrics.AssignWithCapacity over the true
// RTTs): what that placement gives with a perfect attach.
func (s *Swarm) idealAttach(sps []int, capacity int) (metrics.Evaluation, error) {
	l := s.liveSpace()
	lsp := l.local(sps)
	return metrics.Evaluate(l, metrics.AssignWithCapacity(l, lsp, capacity), lsp, capacity)
}

// RandomBaseline picks S random live superpeers and assigns every other
// live peer to its nearest with room, as a yardstick.
func (s *Swarm) RandomBaseline(S, capacity int, rng *rand.Rand) (metrics.Evaluation, error) {
	l := s.liveSpace()
	sps := metrics.RandomSuperpeers(l.Len(), S, rng)
	a := metrics.AssignWithCapacity(l, sps, capacity)
	ev, err := metrics.Evaluate(l, a, sps, capacity)
	ev.SetTarget(S)
	return ev, err
}

// Traffic is the protocol messages and bytes the swarm's live peers sent.
type Traffic struct {
	KadRequests     uint64 `json:"kad_requests"`
	ClosestRequests uint64 `json:"closest_requests"`
	AttachRequests  uint64 `json:"attach_requests"`
	AttachBytes     uint64 `json:"attach_bytes"`
	Lookups         uint64 `json:"selector_lookups"`
}

// Traffic sums the counters of the live peers.
func (s *Swarm) Traffic() Traffic {
	var t Traffic
	for _, i := range s.Live() {
		st := s.Peers[i].Node.Stats()
		t.KadRequests += st.KadSent.Load()
		t.ClosestRequests += st.ClosestSent.Load()
		if sel := s.activeSelector(i); sel != nil {
			a := sel.Attach()
			t.AttachRequests += a.Stats.Sent.Load()
			t.AttachBytes += a.Stats.BytesOut.Load()
			if p, ok := sel.(*superpeer.PrefixSelector); ok {
				t.Lookups += p.Lookups()
			}
		}
	}
	return t
}

// RTTSummary is client→superpeer RTT in ms.
type RTTSummary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
}

// LoadSummary is clients per superpeer.
type LoadSummary struct {
	Max  int     `json:"max"`
	Mean float64 `json:"mean"`
	Gini float64 `json:"gini"`
}

// SelectionSummary is the `superpeers` block of the swarm report.
type SelectionSummary struct {
	Method string `json:"method"`
	Target int    `json:"target"`
	Groups int    `json:"groups"`
	Bits   int    `json:"bits"`
	Count  int    `json:"count"`
	// Expected is the expected number of occupied groups among the live
	// peers (for Lo et al.'s scheme 2^k·(1 − (1 − 2^−k)^n)).
	Expected float64 `json:"expected"`
	// Book is Tanenbaum & van Steen's 2^(k−m)·N with m = 256 and N the
	// number of peers, as printed; it is 2^k only when N = 2^m.
	Book                float64     `json:"book"`
	Capacity            int         `json:"capacity"`
	ClientsPerSuperpeer LoadSummary `json:"clients_per_superpeer"`
	ClientRTT           RTTSummary  `json:"client_rtt_ms"`
	// RandomClientRTT is the same for S random superpeers (seeded), each
	// client with its nearest that has room: the yardstick.
	RandomClientRTT RTTSummary `json:"random_client_rtt_ms"`
	// KMedianClientRTT is the client RTT with a centralised greedy
	// k-median over the live peers' true RTTs (S superpeers, capacity
	// applied): the other yardstick.
	KMedianClientRTT RTTSummary `json:"kmedian_client_rtt_ms"`
	// PlacementClientRTT is the client RTT these superpeers would give
	// with every client attached as the k-median's are (true RTTs,
	// capacity applied): the placement alone, without the clients'
	// choice.
	PlacementClientRTT RTTSummary `json:"placement_client_rtt_ms"`
	// OneSwap is the best exchange of one of these superpeers for another
	// live peer under the k-median objective, no capacity
	// (metrics.BestSwap): how far the placement is from a local optimum
	// of the swap search, and so whether what it loses is a region
	// without a superpeer rather than a superpeer off its clients'
	// centre. Left out above oneSwapBudget (S·n² RTT look-ups).
	OneSwap         *SwapSummary `json:"one_swap,omitempty"`
	Unserved        int          `json:"unserved"`
	Wrong           int          `json:"wrong"`
	ConvergeSeconds float64      `json:"converge_seconds"`
	// PerPeerPerSecond is messages (and attach bytes) each live peer sent
	// per second since selection started, by protocol (after a kill the
	// dead peers' messages drop out of the sums).
	PerPeerPerSecond map[string]float64 `json:"per_peer_per_second"`
}

// SwapSummary is metrics.BestSwap over the live peers: the mean RTT to the
// nearest superpeer before and after the exchange (ms), and the swarm
// indices of the superpeer it drops and the peer it takes (-1: none helps).
type SwapSummary struct {
	BeforeMs float64 `json:"before_ms"`
	AfterMs  float64 `json:"after_ms"`
	Out      int     `json:"out"`
	In       int     `json:"in"`
}

// oneSwapBudget bounds the RTT look-ups of SelectionSummary.OneSwap:
// 2 000 peers and 16 superpeers take 6.4·10⁷, about a second here.
const oneSwapBudget = 2e8

// oneSwap is SelectionSummary.OneSwap for superpeers sps (swarm indices).
func (s *Swarm) oneSwap(sps []int) *SwapSummary {
	l := s.liveSpace()
	n := float64(l.Len())
	if len(sps) == 0 || float64(len(sps))*n*n > oneSwapBudget {
		return nil
	}
	sw := metrics.BestSwap(l, l.local(sps))
	out := &SwapSummary{BeforeMs: sw.Before, AfterMs: sw.After, Out: -1, In: -1}
	if sw.Out >= 0 {
		out.Out, out.In = l.idx[sw.Out], l.idx[sw.In]
	}
	return out
}

// Summary scores the current prefix selection (StartPrefix): PrefixState's
// superpeers and assignment, against what a prefix scheme leads one to
// expect.
func (s *Swarm) Summary(converge time.Duration, rng *rand.Rand) (SelectionSummary, error) {
	st := s.PrefixState()
	sel := s.prefixSelector()
	scheme := sel.Scheme()
	capacity := sel.Attach().Capacity()
	live := len(s.Live())
	sum, err := s.summarize("prefix", st.Assignment, st.Superpeers, st.Unserved, st.Wrong, scheme.Groups(), capacity, converge, s.active.start, s.active.t0, rng)
	sum.Bits = scheme.Bits()
	sum.Expected = scheme.ExpectedCount(live)
	sum.Book = metrics.BookPrefixCount(float64(live), scheme.Bits(), dht.KeyBits)
	return sum, err
}
