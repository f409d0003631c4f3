package elections

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
)

// Scenario is one run: the nodes, their links and latencies, who starts,
// and the failure model's events.
type Scenario struct {
	N    int
	Seed int64
	// RTT is the latency space (ms); nil: a synthetic plane
	// (latency.DefaultSyntheticConfig) of N hosts from Seed. Its Len must
	// be at least N; node i sits on host i.
	RTT      latency.RTTs
	Topology Topology
	// Degree is a Graph's mean degree (default 4); Radius a Geometric
	// graph's link range in the unit square (default: about twice the
	// connectivity threshold, sqrt(2 ln N / (π N)) · 2).
	Degree int
	Radius float64
	// Initiators are the nodes that start an election at time 0; nil: every
	// node. Nodes not listed still get Start at time 0, with
	// Config.Initiator false.
	Initiators []int
	// IDs overrides the seeded permutation of IDs (len N, unique, > 0).
	IDs []int
	// Faults are the failure model's events.
	Faults []Fault
	// Limit stops the run (default 1 h of virtual time).
	Limit time.Duration
	// Trace records every send and delivery (small N only).
	Trace bool
}

// ErrScenario wraps every invalid Scenario.
var ErrScenario = errors.New("elections: bad scenario")

// world is a run in progress.
type world struct {
	sc      Scenario
	loop    *sim.Loop
	rtt     latency.RTTs
	newNode func(Config) Node
	cfgs    []Config
	nodes   []Node
	live    []bool
	paused  [][]func()
	isPause []bool
	// gen counts a node's incarnations: a timer or message for an earlier
	// incarnation is dropped.
	gen    []int
	links  []map[int]bool
	leader []int
	// count[l] is how many live nodes name l; agreed tracks when they last
	// came to agree.
	count    map[int]int
	nlive    int
	agreedAt time.Duration
	agreed   bool
	res      Result
}

// Run runs scenario sc with nodes made by newNode.
func Run(sc Scenario, newNode func(Config) Node) (Result, error) {
	if sc.N < 1 {
		return Result{}, fmt.Errorf("%w: N %d", ErrScenario, sc.N)
	}
	if sc.Limit <= 0 {
		sc.Limit = time.Hour
	}
	rtt := sc.RTT
	if rtt == nil {
		rtt = latency.NewSynthetic(sc.N, sc.Seed, latency.DefaultSyntheticConfig())
	}
	if rtt.Len() < sc.N {
		return Result{}, fmt.Errorf("%w: latency space of %d hosts for %d nodes", ErrScenario, rtt.Len(), sc.N)
	}
	w := &world{sc: sc, loop: &sim.Loop{}, rtt: rtt, newNode: newNode, count: map[int]int{}}
	if err := w.build(); err != nil {
		return Result{}, err
	}
	for _, f := range sc.Faults {
		if f.Node < 0 || f.Node >= sc.N || ((f.Kind == LinkDown || f.Kind == LinkUp) && (f.Peer < 0 || f.Peer >= sc.N || f.Peer == f.Node)) {
			return Result{}, fmt.Errorf("%w: fault %v on node %d peer %d", ErrScenario, f.Kind, f.Node, f.Peer)
		}
		f := f
		w.loop.At(f.At, func() { w.fault(f) })
	}
	for i := range w.nodes {
		w.live[i] = true
	}
	w.nlive = sc.N
	for i := range w.nodes {
		w.leader[i] = -1
	}
	w.count[-1] = sc.N
	for i := range w.nodes {
		w.step(i, func(o *Out) { w.nodes[i].Start(0, o) })
	}
	for w.loop.Pending() > 0 && w.loop.Now() <= sc.Limit {
		w.loop.Step()
	}
	r := &w.res
	r.N = sc.N
	r.End = w.loop.Now()
	r.Agreed = -1
	if w.agreed {
		r.Agreed = w.agreedAt
	}
	r.Leaders = make([]int, sc.N)
	for i := range r.Leaders {
		r.Leaders[i] = -1
		if w.live[i] {
			r.Leaders[i] = w.leader[i]
		}
	}
	r.Live = w.live
	r.Nodes = w.nodes
	r.Configs = w.cfgs
	r.Links = make([][]int, sc.N)
	for i, m := range w.links {
		for j := 0; j < sc.N; j++ {
			if m[j] {
				r.Links[i] = append(r.Links[i], j)
			}
		}
	}
	return *r, nil
}

func (w *world) build() error {
	sc := w.sc
	n := sc.N
	rng := rand.New(rand.NewPCG(uint64(sc.Seed), 0x656c656374))
	ids := sc.IDs
	if ids == nil {
		ids = make([]int, n)
		for i, p := range rng.Perm(n) {
			ids[i] = p + 1
		}
	} else {
		if len(ids) != n {
			return fmt.Errorf("%w: %d IDs for %d nodes", ErrScenario, len(ids), n)
		}
		seen := map[int]bool{}
		for _, id := range ids {
			if id <= 0 || seen[id] {
				return fmt.Errorf("%w: IDs must be positive and unique (%d)", ErrScenario, id)
			}
			seen[id] = true
		}
	}
	w.links = make([]map[int]bool, n)
	for i := range w.links {
		w.links[i] = map[int]bool{}
	}
	link := func(i, j int) {
		if i != j {
			w.links[i][j], w.links[j][i] = true, true
		}
	}
	switch sc.Topology {
	case Complete:
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				link(i, j)
			}
		}
	case Ring:
		for i := 0; i < n; i++ {
			link(i, (i+1)%n)
		}
	case Graph:
		deg := sc.Degree
		if deg <= 0 {
			deg = 4
		}
		perm := rng.Perm(n)
		for k := 0; k < n; k++ {
			link(perm[k], perm[(k+1)%n])
		}
		for extra := n * (deg - 2) / 2; extra > 0 && n > 3; extra-- {
			link(rng.IntN(n), rng.IntN(n))
		}
	case Geometric:
		// Positions are drawn by the caller that moves nodes (Mobility is
		// the scenario's faults); here the initial unit-square graph.
		r := sc.Radius
		if r <= 0 {
			r = 2 * math.Sqrt(2*math.Log(float64(max(n, 2)))/(math.Pi*float64(n)))
		}
		pos := Positions(n, sc.Seed)
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				if math.Hypot(pos[i][0]-pos[j][0], pos[i][1]-pos[j][1]) <= r {
					link(i, j)
				}
			}
		}
	default:
		return fmt.Errorf("%w: topology %v", ErrScenario, sc.Topology)
	}
	initiator := make([]bool, n)
	if sc.Initiators == nil {
		for i := range initiator {
			initiator[i] = true
		}
	}
	for _, i := range sc.Initiators {
		if i < 0 || i >= n {
			return fmt.Errorf("%w: initiator %d of %d nodes", ErrScenario, i, n)
		}
		initiator[i] = true
	}
	var maxDelay time.Duration
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			maxDelay = max(maxDelay, sim.Delay(w.rtt, i, j))
		}
	}
	w.cfgs = make([]Config, n)
	w.nodes = make([]Node, n)
	w.live = make([]bool, n)
	w.paused = make([][]func(), n)
	w.isPause = make([]bool, n)
	w.gen = make([]int, n)
	w.leader = make([]int, n)
	for i := 0; i < n; i++ {
		var nb []int
		if sc.Topology == Ring {
			nb = []int{(i + 1) % n, (i - 1 + n) % n}
		} else {
			for j := 0; j < n; j++ {
				if w.links[i][j] {
					nb = append(nb, j)
				}
			}
		}
		w.cfgs[i] = Config{
			Index: i, N: n, ID: ids[i], IDs: ids, Neighbors: nb,
			Capacity: rng.Float64(), MaxDelay: maxDelay, Initiator: initiator[i],
			Rand: rand.New(rand.NewPCG(uint64(sc.Seed), uint64(i)+1)),
		}
		w.nodes[i] = w.newNode(w.cfgs[i])
	}
	return nil
}

// Positions are the seeded places of n nodes in the unit square that a
// Geometric scenario with this seed starts from.
func Positions(n int, seed int64) [][2]float64 {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x706f73))
	out := make([][2]float64, n)
	for i := range out {
		out[i] = [2]float64{rng.Float64(), rng.Float64()}
	}
	return out
}

// step runs one input of node i (f calls the node) and carries out what
// it asks for, unless the node is paused (then the input waits).
func (w *world) step(i int, f func(o *Out)) {
	if !w.live[i] {
		return
	}
	if w.isPause[i] {
		w.paused[i] = append(w.paused[i], func() { w.step(i, f) })
		return
	}
	var o Out
	f(&o)
	g := w.gen[i]
	for _, s := range o.Sends {
		w.send(i, s.To, s.Msg)
	}
	for _, t := range o.Timers {
		tag := t.Tag
		w.loop.After(max(t.After, 0), func() {
			if w.gen[i] == g {
				w.step(i, func(o *Out) { w.nodes[i].Timeout(w.loop.Now(), tag, o) })
			}
		})
	}
	w.setLeader(i, w.nodes[i].Leader())
}

func (w *world) send(from, to int, m Message) {
	r := &w.res
	r.Messages++
	if r.ByKind == nil {
		r.ByKind = map[string]int{}
	}
	r.ByKind[m.Kind()]++
	now := w.loop.Now()
	if w.sc.Trace {
		r.Trace = append(r.Trace, TraceEvent{At: now, From: from, To: to, Kind: m.Kind(), Detail: detail(m)})
	}
	if to < 0 || to >= w.sc.N || (to != from && !w.links[from][to]) {
		w.lost(from, to, m)
		return
	}
	d := sim.Delay(w.rtt, from, to)
	if d < 0 {
		w.lost(from, to, m)
		return
	}
	g := w.gen[to]
	w.loop.After(d, func() {
		if !w.live[to] || w.gen[to] != g || (to != from && !w.links[from][to]) {
			w.lost(from, to, m)
			return
		}
		if w.sc.Trace {
			r.Trace = append(r.Trace, TraceEvent{At: w.loop.Now(), From: from, To: to, Deliver: true, Kind: m.Kind(), Detail: detail(m)})
		}
		w.step(to, func(o *Out) { w.nodes[to].Receive(w.loop.Now(), from, m, o) })
	})
}

func (w *world) lost(from, to int, m Message) {
	if w.sc.Trace {
		w.res.Trace = append(w.res.Trace, TraceEvent{At: w.loop.Now(), From: from, To: to, Deliver: true, Lost: true, Kind: m.Kind(), Detail: detail(m)})
	}
}

func detail(m Message) string {
	if s, ok := m.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

// setLeader records that node i names l and updates agreement.
func (w *world) setLeader(i, l int) {
	if w.live[i] {
		if w.leader[i] == l {
			return
		}
		w.count[w.leader[i]]--
		w.count[l]++
	}
	w.leader[i] = l
	w.checkAgreed()
}

func (w *world) checkAgreed() {
	now := false
	for l, c := range w.count {
		if l >= 0 && c == w.nlive && c > 0 {
			now = true
		}
	}
	if now && !w.agreed {
		w.agreedAt = w.loop.Now()
		w.res.MessagesAgreed = w.res.Messages
	}
	w.agreed = now
}

func (w *world) fault(f Fault) {
	i := f.Node
	switch f.Kind {
	case Crash:
		if !w.live[i] {
			return
		}
		w.count[w.leader[i]]--
		w.live[i] = false
		w.nlive--
		w.gen[i]++
		w.paused[i], w.isPause[i] = nil, false
		w.checkAgreed()
	case Recover:
		if w.live[i] {
			return
		}
		w.gen[i]++
		w.nodes[i] = w.newNode(w.cfgs[i])
		w.live[i] = true
		w.nlive++
		w.leader[i] = -1
		w.count[-1]++
		w.checkAgreed()
		w.step(i, func(o *Out) { w.nodes[i].Start(w.loop.Now(), o) })
	case Pause:
		if w.live[i] {
			w.isPause[i] = true
		}
	case Resume:
		if !w.isPause[i] {
			return
		}
		w.isPause[i] = false
		held := w.paused[i]
		w.paused[i] = nil
		for _, f := range held {
			f()
		}
	case LinkDown, LinkUp:
		up := f.Kind == LinkUp
		if w.links[i][f.Peer] == up {
			return
		}
		w.links[i][f.Peer], w.links[f.Peer][i] = up, up
		for _, e := range [][2]int{{i, f.Peer}, {f.Peer, i}} {
			a, b := e[0], e[1]
			if lo, ok := w.nodes[a].(LinkObserver); ok {
				w.step(a, func(o *Out) { lo.LinkChanged(w.loop.Now(), b, up, o) })
			}
		}
	case Wake:
		w.step(i, func(o *Out) { w.nodes[i].Start(w.loop.Now(), o) })
	}
}
