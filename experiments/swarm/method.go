package swarm

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// MethodOptions configure a registered method on a swarm (StartMethod).
type MethodOptions struct {
	// Env is every peer's environment (superpeer.Env): S, the attach
	// options, the method's own options. The swarm sets each peer's Seed
	// (from Seed) and, for a method with coordinates, its Vivaldi service
	// (from Vivaldi).
	Env superpeer.Env
	// Seed seeds the selectors (default the swarm's seed + 11).
	Seed int64
	// Vivaldi is the swarm's Vivaldi run, which a method with coordinates
	// needs (superpeer.Method.Coordinates).
	Vivaldi *VivaldiRun
}

// Run is a registered selection method running on every live peer of a
// swarm: what `peer swarm --method NAME` runs for any method, and what the
// method-specific runs (prefix, RepelRun) build their selectors through.
type Run struct {
	s        *Swarm
	m        superpeer.Method
	o        MethodOptions
	sels     []superpeer.Selector
	start    time.Time
	t0       Traffic
	capacity int
	// built, if set, is told of a selector built as its peer joined late
	// (RepelRun keeps its own typed list).
	built func(i int, sel superpeer.Selector)
}

// build makes peer i's selector, with its seed and its Vivaldi service.
func (r *Run) build(i int) (superpeer.Selector, error) {
	env := r.o.Env
	env.Seed = uint64(r.o.Seed)*1_000_003 + uint64(i) + 1
	if r.o.Vivaldi != nil {
		env.Vivaldi = r.o.Vivaldi.Service(i)
		if env.Vivaldi == nil && r.m.Coordinates {
			return nil, fmt.Errorf("swarm: peer %d has no Vivaldi service for %s", i, r.m.Name)
		}
	}
	sel, err := r.m.New(r.s.Peers[i].Node, env)
	if err != nil {
		return nil, fmt.Errorf("swarm: peer %d: %w", i, err)
	}
	return sel, nil
}

// join starts peer i's selector as it joins late (Swarm.JoinLate): built
// now if it was held back without one, after its Vivaldi service.
func (r *Run) join(ctx context.Context, i int) error {
	sel := r.sels[i]
	if sel == nil {
		if r.o.Vivaldi != nil {
			if err := r.o.Vivaldi.join(i); err != nil {
				return err
			}
		}
		var err error
		if sel, err = r.build(i); err != nil {
			return err
		}
		r.sels[i] = sel
		if r.built != nil {
			r.built(i, sel)
		}
	}
	return sel.Start(ctx)
}

// StartMethod builds the named method's selector on every live peer and
// starts them.
func (s *Swarm) StartMethod(ctx context.Context, name string, o MethodOptions) (*Run, error) {
	m, err := superpeer.Lookup(name)
	if err != nil {
		return nil, err
	}
	if m.Coordinates && o.Vivaldi == nil {
		return nil, fmt.Errorf("swarm: method %s places by coordinates: it needs the swarm's Vivaldi run", name)
	}
	if o.Seed == 0 {
		o.Seed = s.cfg.Seed + 11
	}
	r := &Run{s: s, m: m, o: o, sels: make([]superpeer.Selector, len(s.Peers))}
	for i := range s.Peers {
		if s.dead[i].Load() || s.Peers[i].Remote {
			continue
		}
		if s.held[i].Load() && o.Vivaldi != nil {
			// Its Vivaldi service starts when it joins (JoinLate), and
			// its selector, which reads the service, is built then.
			continue
		}
		// Any other held peer gets its selector now, to start when it
		// joins.
		sel, err := r.build(i)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.sels[i] = sel
	}
	for _, sel := range r.sels {
		if sel != nil {
			r.capacity = sel.Attach().Capacity()
			break
		}
	}
	s.active = r
	r.start, r.t0 = time.Now(), s.Traffic()
	for _, i := range s.Live() {
		if err := r.sels[i].Start(ctx); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// StopMethod stops the running method's selectors (Run.Close), if any.
func (s *Swarm) StopMethod() {
	if s.active != nil {
		s.active.Close()
	}
}

// Method is the method running.
func (r *Run) Method() superpeer.Method { return r.m }

// Selector is peer i's selector (nil for a peer that was not live at the
// start).
func (r *Run) Selector(i int) superpeer.Selector { return r.sels[i] }

// Start is when the selectors started.
func (r *Run) Start() time.Time { return r.start }

// RunState is a method's selection as its peers see it, whatever the
// method: who believes it is a superpeer, and whether every client's
// superpeer agrees it serves it.
type RunState struct {
	// Superpeers are the live peers in the superpeer role, sorted.
	Superpeers []int
	// Assignment is every live client's superpeer, where that superpeer
	// lists it.
	Assignment metrics.Assignment
	// Undecided counts live peers with no role yet; Wrong, clients
	// attached to a peer that is not a superpeer or does not list them;
	// Unserved, clients attached to nobody.
	Undecided, Wrong, Unserved int
	// Room is the superpeers' spare capacity: places not taken by a client
	// attached there.
	Room int
}

// Settled is true when every peer has a role, there is a superpeer, and
// every client is attached to one that lists it (or capacity has run out).
func (st RunState) Settled() bool {
	return len(st.Superpeers) > 0 && st.Undecided == 0 && st.Wrong == 0 && (st.Unserved == 0 || st.Room == 0)
}

func (st RunState) String() string {
	return fmt.Sprintf("%d superpeers, %d undecided, %d wrong, %d unserved (room %d)", len(st.Superpeers), st.Undecided, st.Wrong, st.Unserved, st.Room)
}

// State reads every live selector.
func (r *Run) State() RunState {
	return r.s.roleState(func(i int) superpeer.Selector { return r.sels[i] }, r.capacity)
}

// roleState is RunState of the live peers' selectors (sel(i) nil for a peer
// without one).
func (s *Swarm) roleState(sel func(i int) superpeer.Selector, capacity int) RunState {
	st := RunState{Assignment: make(metrics.Assignment, len(s.Peers))}
	for i := range st.Assignment {
		st.Assignment[i] = metrics.Unassigned
	}
	live := s.Live()
	clients := map[int]map[peer.ID]bool{}
	for _, i := range live {
		if x := sel(i); x != nil && x.Role() == superpeer.Superpeer {
			st.Superpeers = append(st.Superpeers, i)
			st.Assignment[i] = i
			set := map[peer.ID]bool{}
			for _, c := range x.Attach().Clients() {
				set[c] = true
			}
			clients[i] = set
		}
	}
	served := map[int]int{}
	for _, i := range live {
		x := sel(i)
		if x == nil || st.Assignment[i] == i {
			continue
		}
		if x.Role() == superpeer.Unknown {
			st.Undecided++
			continue
		}
		sp := x.Superpeer()
		if sp == "" {
			st.Unserved++
			continue
		}
		j := s.Index(sp)
		if j < 0 || !clients[j][s.Peers[i].ID] {
			st.Wrong++
			continue
		}
		st.Assignment[i] = j
		served[j]++
	}
	st.Room = s.room(st.Superpeers, served, capacity)
	return st
}

// room is the superpeers' spare capacity: places not taken by a client
// attached there (served counts them); with no bound, the swarm's size.
// A superpeer's list can hold, for up to a TTL, a client that has left, and
// that stale entry must not make an unserved client look as if nothing were
// free, so the list is not what counts.
func (s *Swarm) room(sps []int, served map[int]int, capacity int) int {
	if capacity == 0 {
		return len(s.Peers)
	}
	r := 0
	for _, j := range sps {
		r += max(0, capacity-served[j])
	}
	return r
}

// WaitSettled polls until the selection has been Settled, with the same
// superpeers and the same assignment, for quiet (in the network's time), and
// returns how long it took from since to the start of that quiet stretch.
// This is convergence for a method the swarm knows nothing of; prefix and
// repel have exact conditions of their own (PrefixState, RepelState).
func (r *Run) WaitSettled(ctx context.Context, since time.Time, quiet time.Duration) (time.Duration, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var (
		last   RunState
		stable time.Time // when last began; zero while not settled
	)
	for {
		st := r.State()
		live := len(r.s.Live())
		r.s.progress("select", live-st.Undecided-st.Wrong-st.Unserved, live)
		switch {
		case !st.Settled():
			stable = time.Time{}
		case stable.IsZero() || !slices.Equal(st.Superpeers, last.Superpeers) || !slices.Equal(st.Assignment, last.Assignment):
			stable, last = time.Now(), st
		case r.s.Elapsed(stable) >= quiet:
			return r.s.Elapsed(since) - r.s.Elapsed(stable), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("swarm: %s not settled: %s: %w", r.m.Name, st, ctx.Err())
		case <-tick.C:
		}
	}
}

// Summary scores the current selection: superpeers, load, client RTT
// against S random superpeers, the greedy k-median and the ideal attach to
// these superpeers, and the traffic since the start per peer per second.
func (r *Run) Summary(converge time.Duration, S int, rng *rand.Rand) (SelectionSummary, error) {
	st := r.State()
	return r.s.summarize(r.m.Name, st.Assignment, st.Superpeers, st.Unserved, st.Wrong, S, r.capacity, converge, r.start, r.t0, rng)
}

// summarize is the SelectionSummary of an assignment: the fields every
// method shares.
func (s *Swarm) summarize(method string, a metrics.Assignment, sps []int, unserved, wrong, S, capacity int, converge time.Duration, start time.Time, t0 Traffic, rng *rand.Rand) (SelectionSummary, error) {
	live := s.Live()
	sum := SelectionSummary{
		Method:          method,
		Target:          S,
		Groups:          S,
		Count:           len(sps),
		Expected:        float64(S),
		Capacity:        capacity,
		Unserved:        unserved,
		Wrong:           wrong,
		ConvergeSeconds: converge.Seconds(),
	}
	ev, err := s.Evaluate(a, sps, capacity, S)
	if err != nil {
		return sum, err
	}
	sum.ClientsPerSuperpeer = LoadSummary{Max: ev.Load.Max, Mean: ev.Load.Mean, Gini: ev.Load.Gini}
	sum.ClientRTT = RTTSummary{ev.ClientRTT.Mean, ev.ClientRTT.P50, ev.ClientRTT.P90}
	rb, err := s.RandomBaseline(S, capacity, rng)
	if err != nil {
		return sum, err
	}
	sum.RandomClientRTT = RTTSummary{rb.ClientRTT.Mean, rb.ClientRTT.P50, rb.ClientRTT.P90}
	l := s.liveSpace()
	km := metrics.GreedyKMedian(l, S)
	if kev, err := metrics.Evaluate(l, metrics.AssignWithCapacity(l, km, capacity), km, capacity); err == nil {
		sum.KMedianClientRTT = RTTSummary{kev.ClientRTT.Mean, kev.ClientRTT.P50, kev.ClientRTT.P90}
	}
	if len(sps) > 0 {
		if pl, err := s.idealAttach(sps, capacity); err == nil {
			sum.PlacementClientRTT = RTTSummary{pl.ClientRTT.Mean, pl.ClientRTT.P50, pl.ClientRTT.P90}
		}
		sum.OneSwap = s.oneSwap(sps)
	}
	secs := s.Elapsed(start).Seconds()
	t := s.Traffic()
	per := func(x uint64) float64 { return float64(x) / float64(max(len(live), 1)) / secs }
	sum.PerPeerPerSecond = map[string]float64{
		"kad_requests":     per(t.KadRequests - min(t.KadRequests, t0.KadRequests)),
		"closest_requests": per(t.ClosestRequests - min(t.ClosestRequests, t0.ClosestRequests)),
		"attach_requests":  per(t.AttachRequests - min(t.AttachRequests, t0.AttachRequests)),
		"attach_bytes":     per(t.AttachBytes - min(t.AttachBytes, t0.AttachBytes)),
	}
	return sum, nil
}

// PickKill chooses a fraction of the live peers at random, plus (with
// superpeers) every current superpeer.
func (r *Run) PickKill(fraction float64, superpeers bool, rng *rand.Rand) []int {
	s := r.s
	live := s.Live()
	rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
	n := int(fraction*float64(len(live)) + 0.5)
	chosen := map[int]bool{}
	for _, i := range live[:min(n, len(live))] {
		chosen[i] = true
	}
	if superpeers {
		for _, i := range live {
			if r.sels[i].Role() == superpeer.Superpeer {
				chosen[i] = true
			}
		}
	}
	out := make([]int, 0, len(chosen))
	for i := range chosen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Kill crashes the given peers: selector, Vivaldi service (if any), DHT
// node and host.
func (r *Run) Kill(idx []int) {
	var wg sync.WaitGroup
	for _, i := range idx {
		if sel := r.sels[i]; sel != nil && !r.s.dead[i].Load() {
			wg.Add(1)
			go func() { defer wg.Done(); _ = sel.Close() }()
		}
	}
	wg.Wait()
	if r.o.Vivaldi != nil {
		r.o.Vivaldi.Kill(idx)
	}
	r.s.Kill(idx)
}

// Close stops every selector; the swarm (and its Vivaldi services) stay up,
// so that another method can run on it.
func (r *Run) Close() {
	if r.s.active == r {
		r.s.active = nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, sel := range r.sels {
		if sel != nil && !r.s.dead[i].Load() {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_ = sel.Close()
			}()
		}
	}
	wg.Wait()
}
