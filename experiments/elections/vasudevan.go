package elections

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Vasudevan, Kurose and Towsley's election for mobile ad hoc networks
// (ICNP 2004): every connected component elects its most capable node
// (highest Config.Capacity, ties by ID) and keeps doing so as links come
// and go. A node learns of its links coming and going from the runner
// (LinkChanged), in place of the paper's probes of its neighbours.
//
// An election is a diffusing computation with an index (num, id), the
// initiator's: it sends ELECTION to its neighbours; a node reached for the
// first time takes the sender for parent and passes ELECTION on to its
// other neighbours, and once all of them have answered it sends its parent
// an ACK naming the most capable node of its subtree; a node already in
// the computation answers at once with an empty ACK. When the initiator
// has every ACK it announces the winner with LEADER down the tree. A node
// in an election leaves it for one of higher index (num first) and ignores
// the messages of lower ones, which stalls them; a node not in one joins
// any computation it has not finished, so that an election reaches the
// whole component.
//
// The leader sends HEARTBEAT every second, flooded (each node passes on
// each (leader, seq) once). A node that hears none for 3.5 s starts an
// election with a num above any it has seen; so does a node whose parent
// link goes down during an election, and one whose election has not ended
// in 10 s (a stalled computation). A node that loses a child stops waiting
// for it. When a link comes up, each end tells the other its leader's last
// heartbeat and how long ago it came: a node takes the leader of a
// heartbeat if it is more capable than its own, so when components merge
// the more capable leader's heartbeats spread over the merged component
// and the other leader steps down. A stale heartbeat so passed on keeps
// its age, so a departed leader is not kept alive by it. A node's leader
// is never less capable than itself, so once a component's nodes agree,
// they agree on its most capable node.
type vasudevan struct {
	cfg Config
	// nbrs are the node's current links, sorted.
	nbrs []int
	// maxNum is the highest computation num seen.
	maxNum int
	// The computation the node is in (active) or last took part in.
	active  bool
	src     vComp
	parent  int
	waiting map[int]bool
	best    vCand
	elecGen int
	// The leader, when it was last heard from, and the last heartbeat seq
	// taken from each leader.
	leader vCand
	lastHB time.Duration
	seen   map[int]int
	hbSeq  int
	hbGen  int
}

// vCand is a candidate: index, capacity, ID; Index −1 is none.
type vCand struct {
	Index int
	Cap   float64
	ID    int
}

// better: more capable, ties by ID; anyone is better than none.
func (a vCand) better(b vCand) bool {
	if b.Index < 0 {
		return a.Index >= 0
	}
	if a.Index < 0 {
		return false
	}
	if a.Cap != b.Cap {
		return a.Cap > b.Cap
	}
	return a.ID > b.ID
}

func (a vCand) String() string { return fmt.Sprintf("node %d (cap %.3f, id %d)", a.Index, a.Cap, a.ID) }

var vNone = vCand{Index: -1}

// vComp is a computation index: (num, initiator ID), ordered by num then
// ID.
type vComp struct{ Num, ID int }

func (a vComp) less(b vComp) bool { return a.Num < b.Num || a.Num == b.Num && a.ID < b.ID }

type (
	vElection struct{ Src vComp }
	// vAck answers an ELECTION: Child says the sender joined the
	// computation under the receiver and Best is its subtree's best;
	// otherwise it is the empty answer of a node already in it.
	vAck struct {
		Src   vComp
		Child bool
		Best  vCand
	}
	vLeader struct {
		Src    vComp
		Leader vCand
	}
	// vHeartbeat is the leader's; Age is how long ago the leader sent it,
	// as far as the sender knows (zero unless passed on a new link).
	vHeartbeat struct {
		Leader   vCand
		Num, Seq int
		Age      time.Duration
	}
)

func (vElection) Kind() string  { return "ELECTION" }
func (vAck) Kind() string       { return "ACK" }
func (vLeader) Kind() string    { return "LEADER" }
func (vHeartbeat) Kind() string { return "HEARTBEAT" }

func (m vElection) String() string { return fmt.Sprintf("(%d,%d)", m.Src.Num, m.Src.ID) }
func (m vAck) String() string {
	if !m.Child {
		return fmt.Sprintf("(%d,%d) empty", m.Src.Num, m.Src.ID)
	}
	return fmt.Sprintf("(%d,%d) best %v", m.Src.Num, m.Src.ID, m.Best)
}
func (m vLeader) String() string { return fmt.Sprintf("(%d,%d) %v", m.Src.Num, m.Src.ID, m.Leader) }
func (m vHeartbeat) String() string {
	return fmt.Sprintf("%v seq %d age %v", m.Leader, m.Seq, m.Age)
}

const (
	vHBPeriod        = time.Second
	vHBTimeout       = 3500 * time.Millisecond
	vElectionTimeout = 10 * time.Second
)

// Timer kinds; the election timer's and the heartbeat's tags carry their
// generation.
const (
	vCheck = iota
	vElectionTimer
	vBeat
	vKinds
)

func newVasudevan(c Config) Node {
	return &vasudevan{
		cfg: c, nbrs: slices.Clone(c.Neighbors), parent: -1,
		leader: vNone, seen: map[int]int{},
	}
}

func (n *vasudevan) self() vCand {
	return vCand{Index: n.cfg.Index, Cap: n.cfg.Capacity, ID: n.cfg.ID}
}

func (n *vasudevan) Start(now time.Duration, o *Out) {
	o.After(vHBPeriod, vCheck)
	if n.cfg.Initiator {
		n.elect(now, o)
	}
}

// elect starts a computation of the node's own.
func (n *vasudevan) elect(now time.Duration, o *Out) {
	n.maxNum++
	n.join(now, vComp{Num: n.maxNum, ID: n.cfg.ID}, -1, o)
}

// join enters computation src under parent (−1: as its initiator).
func (n *vasudevan) join(now time.Duration, src vComp, parent int, o *Out) {
	n.active, n.src, n.parent = true, src, parent
	n.leader, n.best = vNone, n.self()
	n.waiting = map[int]bool{}
	for _, j := range n.nbrs {
		if j != parent {
			n.waiting[j] = true
			o.Send(j, vElection{Src: src})
		}
	}
	n.elecGen++
	o.After(vElectionTimeout, n.elecGen*vKinds+vElectionTimer)
	n.echo(now, o)
}

// echo answers the parent, or announces the winner, once every child has
// answered.
func (n *vasudevan) echo(now time.Duration, o *Out) {
	if !n.active || len(n.waiting) > 0 {
		return
	}
	if n.parent >= 0 {
		o.Send(n.parent, vAck{Src: n.src, Child: true, Best: n.best})
		return
	}
	n.announce(now, n.best, -1, o)
}

// announce ends the computation with leader l and passes it on.
func (n *vasudevan) announce(now time.Duration, l vCand, from int, o *Out) {
	n.active = false
	n.leader, n.lastHB = l, now
	for _, j := range n.nbrs {
		if j != from {
			o.Send(j, vLeader{Src: n.src, Leader: l})
		}
	}
	if l.Index == n.cfg.Index {
		n.hbGen++
		n.beat(o)
	}
}

// beat sends a heartbeat and sets the next.
func (n *vasudevan) beat(o *Out) {
	n.hbSeq++
	n.seen[n.cfg.Index] = n.hbSeq
	for _, j := range n.nbrs {
		o.Send(j, vHeartbeat{Leader: n.self(), Num: n.maxNum, Seq: n.hbSeq})
	}
	o.After(vHBPeriod, n.hbGen*vKinds+vBeat)
}

func (n *vasudevan) Receive(now time.Duration, from int, m Message, o *Out) {
	switch m := m.(type) {
	case vElection:
		n.maxNum = max(n.maxNum, m.Src.Num)
		switch {
		case m.Src == n.src:
			o.Send(from, vAck{Src: m.Src})
		case !n.active || n.src.less(m.Src):
			n.join(now, m.Src, from, o)
		}
	case vAck:
		if n.active && m.Src == n.src && n.waiting[from] {
			delete(n.waiting, from)
			if m.Child && m.Best.better(n.best) {
				n.best = m.Best
			}
			n.echo(now, o)
		}
	case vLeader:
		n.maxNum = max(n.maxNum, m.Src.Num)
		if !n.active || m.Src != n.src {
			return
		}
		if n.self().better(m.Leader) {
			// The winner was chosen without this node's answer (its parent
			// left for another computation): the component needs another.
			n.elect(now, o)
			return
		}
		n.announce(now, m.Leader, from, o)
	case vHeartbeat:
		n.maxNum = max(n.maxNum, m.Num)
		l := m.Leader
		if n.active || m.Seq <= n.seen[l.Index] {
			return
		}
		if l.Index != n.leader.Index && !l.better(n.leader) {
			return
		}
		if n.leader.Index < 0 && n.self().better(l) {
			// A node with no leader yet that is more capable than this one
			// must have an election: its first check starts one.
			return
		}
		n.seen[l.Index] = m.Seq
		n.leader, n.lastHB = l, now-m.Age
		for _, j := range n.nbrs {
			if j != from {
				o.Send(j, m)
			}
		}
	}
}

func (n *vasudevan) Timeout(now time.Duration, tag int, o *Out) {
	gen, kind := tag/vKinds, tag%vKinds
	switch kind {
	case vCheck:
		o.After(vHBPeriod, vCheck)
		if !n.active && n.leader.Index != n.cfg.Index && (n.leader.Index < 0 || now-n.lastHB > vHBTimeout) {
			n.elect(now, o)
		}
	case vElectionTimer:
		if n.active && gen == n.elecGen {
			n.elect(now, o)
		}
	case vBeat:
		if !n.active && gen == n.hbGen && n.leader.Index == n.cfg.Index {
			n.beat(o)
		}
	}
}

// LinkChanged keeps the neighbour list; a lost parent restarts the
// election, a lost child is no longer waited for, and a new neighbour
// hears of this node's leader.
func (n *vasudevan) LinkChanged(now time.Duration, peer int, up bool, o *Out) {
	i, found := slices.BinarySearch(n.nbrs, peer)
	if !up {
		if found {
			n.nbrs = slices.Delete(n.nbrs, i, i+1)
		}
		if !n.active {
			return
		}
		if peer == n.parent {
			n.elect(now, o)
			return
		}
		if n.waiting[peer] {
			delete(n.waiting, peer)
			n.echo(now, o)
		}
		return
	}
	if !found {
		n.nbrs = slices.Insert(n.nbrs, i, peer)
	}
	if !n.active && n.leader.Index >= 0 {
		age := now - n.lastHB
		if n.leader.Index == n.cfg.Index {
			age = 0
		}
		o.Send(peer, vHeartbeat{Leader: n.leader, Num: n.maxNum, Seq: n.seen[n.leader.Index], Age: age})
	}
}

// Leader is the node's leader; −1 during an election.
func (n *vasudevan) Leader() int {
	if n.active {
		return -1
	}
	return n.leader.Index
}

// Components are the connected components of the live nodes over links,
// each sorted, in order of their lowest index.
func Components(links [][]int, live []bool) [][]int {
	seen := make([]bool, len(links))
	var out [][]int
	for s := range links {
		if seen[s] || !live[s] {
			continue
		}
		seen[s] = true
		comp := []int{s}
		for k := 0; k < len(comp); k++ {
			for _, j := range links[comp[k]] {
				if !seen[j] && live[j] {
					seen[j] = true
					comp = append(comp, j)
				}
			}
		}
		slices.Sort(comp)
		out = append(out, comp)
	}
	return out
}

// CheckComponents judges a run on a graph that may be partitioned: in
// each connected component of the live nodes at the end (Result.Links),
// every node names one leader (OneLeader), and it is the component's most
// capable node, highest Capacity with ties broken by ID (RightLeader).
func CheckComponents(r Result) Verdict {
	v := Verdict{OneLeader: true, RightLeader: true}
	for _, comp := range Components(r.Links, r.Live) {
		want := comp[0]
		for _, i := range comp {
			a, b := r.Configs[i], r.Configs[want]
			if a.Capacity > b.Capacity || a.Capacity == b.Capacity && a.ID > b.ID {
				want = i
			}
		}
		l := r.Leaders[comp[0]]
		for _, i := range comp {
			if r.Leaders[i] != l {
				return Verdict{Note: fmt.Sprintf("component of %d nodes: node %d names %d, node %d names %d", len(comp), comp[0], l, i, r.Leaders[i])}
			}
		}
		if l != want && v.RightLeader {
			v.RightLeader = false
			v.Note = fmt.Sprintf("component of %d nodes names %d, its most capable is %d", len(comp), l, want)
		}
	}
	return v
}

// vRadius is the link range of the Vasudevan scenarios: about the unit
// square's connectivity threshold, sqrt(2 ln n / (π n)), so that moving
// nodes split and merge components.
func vRadius(n int) float64 {
	return math.Sqrt(2 * math.Log(float64(max(n, 2))) / (math.Pi * float64(n)))
}

// The scenarios' times: the mobile nodes move from vMoveStart to vMoveEnd,
// their links sampled every vMoveStep; the partition cuts the square at
// vCutAt and heals at vHealAt; a run ends vSettle after its last link change.
const (
	vMoveStart = 10 * time.Second
	vMoveEnd   = 70 * time.Second
	vMoveStep  = time.Second
	vCutAt     = 10 * time.Second
	vHealAt    = 30 * time.Second
	vSettle    = 30 * time.Second
)

// vLinkFaults are the LinkDown and LinkUp faults at time at that take the
// links of positions pos (range r) from up to what they are now.
func vLinkFaults(at time.Duration, pos [][2]float64, r float64, up [][]bool) []Fault {
	var out []Fault
	for i := range pos {
		for j := i + 1; j < len(pos); j++ {
			now := math.Hypot(pos[i][0]-pos[j][0], pos[i][1]-pos[j][1]) <= r
			if now != up[i][j] {
				up[i][j] = now
				k := LinkDown
				if now {
					k = LinkUp
				}
				out = append(out, Fault{At: at, Kind: k, Node: i, Peer: j})
			}
		}
	}
	return out
}

// unitDisc is the unit-disc graph of pos with range r.
func unitDisc(pos [][2]float64, r float64) [][]bool {
	up := make([][]bool, len(pos))
	for i := range up {
		up[i] = make([]bool, len(pos))
	}
	vLinkFaults(0, pos, r, up)
	return up
}

// Waypoint moves n nodes by the random waypoint model, seeded: from
// Positions(n, seed), each node walks to a uniform point of the unit
// square at a uniform speed in [vmin, vmax] (per second), pauses there,
// and picks the next; the links at range r are sampled every step from
// start to end and their changes returned as faults.
func Waypoint(n int, seed int64, r, vmin, vmax float64, pause, start, end, step time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x776179))
	pos := Positions(n, seed)
	up := unitDisc(pos, r)
	type walker struct {
		to    [2]float64
		speed float64
		rest  time.Duration
	}
	ws := make([]walker, n)
	next := func(w *walker) {
		w.to = [2]float64{rng.Float64(), rng.Float64()}
		w.speed = vmin + (vmax-vmin)*rng.Float64()
	}
	for i := range ws {
		next(&ws[i])
	}
	var out []Fault
	for t := start + step; t <= end; t += step {
		for i := range ws {
			w := &ws[i]
			left := step.Seconds()
			for left > 0 {
				if w.rest > 0 {
					d := min(w.rest, time.Duration(left*float64(time.Second)))
					w.rest -= d
					left -= d.Seconds()
					if w.rest > 0 {
						break
					}
					next(w)
					continue
				}
				dx, dy := w.to[0]-pos[i][0], w.to[1]-pos[i][1]
				dist := math.Hypot(dx, dy)
				if move := w.speed * left; move < dist {
					pos[i][0] += dx / dist * move
					pos[i][1] += dy / dist * move
					break
				}
				pos[i] = w.to
				left -= dist / w.speed
				w.rest = pause
				if pause <= 0 {
					next(w)
				}
			}
		}
		out = append(out, vLinkFaults(t, pos, r, up)...)
	}
	return out
}

// CutSquare is the partition of the unit-disc graph of Positions(n, seed) at
// range r by the line x = 0.5: the links across it go down at cut and come
// back at heal.
func CutSquare(n int, seed int64, r float64, cut, heal time.Duration) []Fault {
	pos := Positions(n, seed)
	up := unitDisc(pos, r)
	var down, back []Fault
	for i := range pos {
		for j := i + 1; j < n; j++ {
			if up[i][j] && (pos[i][0] < 0.5) != (pos[j][0] < 0.5) {
				down = append(down, Fault{At: cut, Kind: LinkDown, Node: i, Peer: j})
				back = append(back, Fault{At: heal, Kind: LinkUp, Node: i, Peer: j})
			}
		}
	}
	return append(down, back...)
}

func init() {
	for _, v := range []struct {
		variant, summary string
		faults           func(n int, seed int64, r float64) []Fault
		last             time.Duration
	}{
		{"", "Vasudevan et al. on a static unit-disc graph, every node initiating: each component elects its most capable node (capacity, ties by ID)", nil, 0},
		{"partition", "Vasudevan et al., the square cut in two and healed: the part that lost its leader elects its own, the merged graph the most capable", func(n int, seed int64, r float64) []Fault {
			return CutSquare(n, seed, r, vCutAt, vHealAt)
		}, vHealAt},
		{"mobile", "Vasudevan et al. with random waypoint mobility (partitions and merges): at the end each component's most capable node leads it", func(n int, seed int64, r float64) []Fault {
			return Waypoint(n, seed, r, 0.005, 0.02, 2*time.Second, vMoveStart, vMoveEnd, vMoveStep)
		}, vMoveEnd},
	} {
		v := v
		register(Algorithm{
			Name: "vasudevan", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				r := vRadius(n)
				sc := Scenario{N: n, Seed: seed, Topology: Geometric, Radius: r, Limit: v.last + vSettle}
				if v.faults != nil {
					sc.Faults = v.faults(n, seed, r)
				}
				return sc
			},
			New: newVasudevan, Check: CheckComponents,
			Sizes: []int{8, 16, 32, 64, 128}, Quick: []int{16, 64},
		})
	}
}
