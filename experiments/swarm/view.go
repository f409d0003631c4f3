package swarm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"sync"
	"time"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// View reads a running swarm for display (`peer swarm --web`): read-only
// snapshots of where the peers are in coordinate space, their roles, the
// tokens with the holders they passed through, the client → superpeer links,
// the superpeers' loads, the kills, and the figures a report prints (client
// RTT against random superpeers and the greedy k-median, the coordinates'
// error, messages per peer per second).
//
// A snapshot costs a pass over every live peer's selector and coordinate;
// a caller takes one only while somebody looks. Between snapshots a
// tracker goroutine (Track) reads, once a second, who holds each token and
// which peers died, so that trails and kills are complete whenever a
// viewer arrives.
//
// The swarm's own calls (StartMethod, Kill, ...) are not safe against one
// another; the View is told of a method by the goroutine that starts it
// (Watch, WatchRepel, WatchActive), and kills through Kill are serialized
// with snapshots.
type View struct {
	s     *Swarm
	start time.Time

	mu       sync.Mutex
	vr       *VivaldiRun
	run      *Run
	rr       *RepelRun
	stage    Stage
	ready    bool
	axes     [2][]float64
	lastXY   map[int][2]float64 // last projected position, kept for the dead
	seenDead []bool
	events   []Event
	eventSeq int
	trails   map[uint32][]int // per token, the holders it passed through (newest last)
	holders  map[uint32][]int // per token, its live holders at the last look
	yard     yardsticks
	rate     rateMark
	repelSum map[string]uint64 // summed repel counters at the last snapshot
}

// Stage is how far the swarm has come (the progress of Swarm's Config).
type Stage struct {
	Name  string `json:"name"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
}

// yardsticks caches the random and k-median client RTTs of one set of live
// peers: recomputed only when peers die.
type yardsticks struct {
	live            int
	S, capacity     int
	random, kmedian float64
}

// rateMark is the messages counted at the last snapshot.
type rateMark struct {
	at    time.Time
	total uint64
	live  int
}

// Snapshot is what the live map draws. Positions and RTTs are in ms; every
// peer is named by its swarm index.
type Snapshot struct {
	// Mode is "swarm" (a View) or "peer" (`peer run --web`: one peer's own
	// view, Self its index in Peers).
	Mode string `json:"mode"`
	Self int    `json:"self"`
	// Seq grows by one per snapshot; T is the seconds since the view
	// started.
	Seq    int64   `json:"seq"`
	T      float64 `json:"t"`
	Stage  Stage   `json:"stage"`
	Method string  `json:"method"`
	// Ready is set once the swarm has reported and runs on to be watched
	// and driven: kills are taken from then on.
	Ready bool `json:"ready"`
	// N is the swarm's size; Live the peers not killed; Target S; Capacity
	// C (0: unbounded).
	N        int `json:"n"`
	Live     int `json:"live"`
	Target   int `json:"target"`
	Capacity int `json:"capacity"`
	// Superpeers counts the live peers in the superpeer role.
	Superpeers int         `json:"superpeers"`
	Peers      []PeerView  `json:"peers"`
	Tokens     []TokenView `json:"tokens,omitempty"`
	Groups     []GroupView `json:"groups,omitempty"`
	Loads      []LoadView  `json:"loads"`
	// Spread is the share of the coordinates' variance the 2-D projection
	// keeps (0 without coordinates).
	Spread  float64 `json:"spread"`
	Figures Figures `json:"figures"`
	// Events are the latest kills, fencings and mints, oldest first.
	Events []Event `json:"events"`
	// Killed counts the dead peers.
	Killed int `json:"killed"`
}

// PeerView is one peer on the map.
type PeerView struct {
	I  int    `json:"i"`
	ID string `json:"id"` // the peer ID's last characters
	// X, Y are the projection of its Vivaldi vector (ms); H its height
	// (ms); Pos is false for a peer with no coordinate yet. A dead peer
	// keeps its last position.
	Pos bool    `json:"pos"`
	X   float64 `json:"x"`
	Y   float64 `json:"y"`
	H   float64 `json:"h"`
	// K is its key's place in the key space, in [0, 1).
	K float64 `json:"k"`
	// Role is superpeer, holder (a repel token not settled yet), client
	// (attached to a superpeer that lists it), unserved (a client attached
	// to nobody, or wrongly), unknown (no role yet) or dead.
	Role string `json:"role"`
	// SP is the superpeer that serves it (its own index for a superpeer,
	// -1 for none).
	SP int `json:"sp"`
	// G is its prefix group (-1 for other methods).
	G int `json:"g"`
}

// TokenView is a repel token.
type TokenView struct {
	ID uint32 `json:"id"`
	// Holder is its live holder (-1: nobody); Holders all of them (more
	// than one until fencing resolves a duplicate).
	Holder  int    `json:"holder"`
	Holders []int  `json:"holders,omitempty"`
	Epoch   uint64 `json:"epoch"`
	Settled bool   `json:"settled"`
	// Trail is the holders it passed through, oldest first, ending with
	// the current one (at most trailLen).
	Trail []int `json:"trail"`
}

// GroupView is a prefix group: its arc of the key space and its
// superpeer.
type GroupView struct {
	G     int     `json:"g"`
	Start float64 `json:"start"`
	Share float64 `json:"share"`
	// SP is the live peer of the group in the superpeer role (-1: none);
	// Expected the one all keys call for.
	SP       int `json:"sp"`
	Expected int `json:"expected"`
	Members  int `json:"members"`
}

// LoadView is a superpeer's load against its capacity.
type LoadView struct {
	SP       int `json:"sp"`
	Load     int `json:"load"`
	Capacity int `json:"capacity"`
}

// Figures are the live numbers beside the map.
type Figures struct {
	// ClientRTT is the mean true RTT of the served clients to their
	// superpeer; RandomRTT and KMedianRTT the same for S random
	// superpeers and the greedy k-median over the live peers (0 until a
	// method runs).
	ClientRTT  float64 `json:"client_rtt_ms"`
	RandomRTT  float64 `json:"random_rtt_ms"`
	KMedianRTT float64 `json:"kmedian_rtt_ms"`
	Served     int     `json:"served"`
	Unserved   int     `json:"unserved"`
	Wrong      int     `json:"wrong"`
	// VivaldiMedian and VivaldiP90 are the coordinates' relative error
	// over sampled pairs of live peers.
	VivaldiMedian float64 `json:"vivaldi_median"`
	VivaldiP90    float64 `json:"vivaldi_p90"`
	// MsgsPerPeerSec is the protocol messages each live peer sent per
	// second since the last snapshot: kad and raw-key lookups, attach
	// requests, Vivaldi exchanges, token announcements, moves and
	// surveys.
	MsgsPerPeerSec float64 `json:"msgs_per_peer_s"`
	// Fenced, Minted and Moves are the repel counters so far.
	Fenced uint64 `json:"fenced"`
	Minted uint64 `json:"minted"`
	Moves  uint64 `json:"moves"`
}

// Event is a kill, a fencing or a mint, as it happens.
type Event struct {
	Seq  int     `json:"seq"`
	T    float64 `json:"t"`
	Kind string  `json:"kind"` // kill, fenced, minted
	// Peers are the peers killed; Superpeers how many of them were
	// superpeers (when known: a kill through the View); Count the
	// fencings or mints since the last snapshot.
	Peers      []int  `json:"peers,omitempty"`
	Superpeers int    `json:"superpeers,omitempty"`
	Count      uint64 `json:"count,omitempty"`
	Why        string `json:"why,omitempty"`
}

const (
	trailLen     = 32
	eventsKept   = 64
	errorPairs   = 4000
	trackerEvery = time.Second
)

// NewView makes a view of s; it follows no method until told (Watch).
func NewView(s *Swarm) *View {
	return &View{s: s, start: time.Now(), lastXY: map[int][2]float64{}, seenDead: make([]bool, len(s.Peers)),
		trails: map[uint32][]int{}, holders: map[uint32][]int{}}
}

// Progress records the swarm's stage (Config.Progress); nil-safe.
func (v *View) Progress(stage string, done, total int) {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.stage = Stage{stage, done, total}
	v.mu.Unlock()
}

// SetVivaldi gives the view the swarm's coordinates; nil-safe.
func (v *View) SetVivaldi(vr *VivaldiRun) {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.vr = vr
	v.mu.Unlock()
}

// Watch follows a running method; nil-safe.
func (v *View) Watch(r *Run) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.run, v.rr = r, nil
	v.newMethod()
}

// WatchActive follows the method the swarm runs now (StartPrefix returns
// no Run); nil-safe.
func (v *View) WatchActive() {
	if v == nil {
		return
	}
	v.Watch(v.s.active)
}

// WatchRepel follows a repel run; nil-safe.
func (v *View) WatchRepel(rr *RepelRun) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.run, v.rr = rr.run, rr
	v.newMethod()
}

func (v *View) newMethod() {
	v.trails, v.holders = map[uint32][]int{}, map[uint32][]int{}
	v.yard = yardsticks{}
	v.repelSum = nil
}

// SetReady marks the swarm as reported and running on to be watched:
// Kill is taken from now on; nil-safe.
func (v *View) SetReady() {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.ready = true
	v.stage = Stage{Name: "live"}
	v.mu.Unlock()
}

// Track reads, every second until stop closes, the tokens' holders and
// which peers died, so that trails and kills are complete when somebody
// looks. It costs a lock of every live repel selector a second.
func (v *View) Track(stop <-chan struct{}) {
	t := time.NewTicker(trackerEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		v.mu.Lock()
		v.noteDeaths("")
		v.noteHolders()
		v.mu.Unlock()
	}
}

// noteDeaths records as one kill event the peers that died since the
// last look (killed other than through Kill: `--kill`).
func (v *View) noteDeaths(why string) {
	var newly []int
	for i := range v.s.dead {
		if v.s.dead[i].Load() && !v.seenDead[i] {
			v.seenDead[i] = true
			newly = append(newly, i)
		}
	}
	if len(newly) > 0 {
		v.event(Event{Kind: "kill", Peers: newly, Why: why})
	}
}

func (v *View) event(e Event) {
	v.eventSeq++
	e.Seq, e.T = v.eventSeq, round(time.Since(v.start).Seconds(), 1000)
	v.events = append(v.events, e)
	if len(v.events) > eventsKept {
		v.events = append([]Event(nil), v.events[len(v.events)-eventsKept:]...)
	}
}

// noteHolders reads every live repel selector's token and extends the
// trails of the tokens that changed holder.
func (v *View) noteHolders() {
	if v.rr == nil {
		return
	}
	now := map[uint32][]int{}
	for _, i := range v.s.Live() {
		if sel := v.rr.sels[i]; sel != nil {
			if t, ok := sel.Held(); ok {
				now[t.ID] = append(now[t.ID], i)
			}
		}
	}
	for id, hs := range now {
		tr := v.trails[id]
		for _, h := range hs {
			if len(tr) == 0 || tr[len(tr)-1] != h {
				tr = append(tr, h)
			}
		}
		if len(tr) > trailLen {
			tr = append([]int(nil), tr[len(tr)-trailLen:]...)
		}
		v.trails[id] = tr
	}
	v.holders = now
}

// ErrNotReady is Kill before the swarm has reported (SetReady), or with
// no method running.
var ErrNotReady = errors.New("swarm: not running a method to be driven yet")

// Kill crashes the given live peers through the running method (selector,
// Vivaldi service, node and host) and records the kill.
func (v *View) Kill(idx []int, why string) (superpeers int, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready || v.run == nil {
		return 0, ErrNotReady
	}
	for _, i := range idx {
		if i < 0 || i >= len(v.s.Peers) || !v.s.live(i) {
			return 0, fmt.Errorf("swarm: peer %d is not a live peer", i)
		}
	}
	for _, i := range idx {
		if sel := v.run.sels[i]; sel != nil && sel.Role() == superpeer.Superpeer {
			superpeers++
		}
	}
	v.noteDeaths("")
	if v.rr != nil {
		v.rr.Kill(idx)
	} else {
		v.run.Kill(idx)
	}
	for _, i := range idx {
		v.seenDead[i] = true
	}
	v.event(Event{Kind: "kill", Peers: append([]int(nil), idx...), Superpeers: superpeers, Why: why})
	return superpeers, nil
}

// PickSuperpeer is a random live superpeer of the running method (-1:
// none).
func (v *View) PickSuperpeer(rng *rand.Rand) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.run == nil {
		return -1
	}
	var sps []int
	for _, i := range v.s.Live() {
		if sel := v.run.sels[i]; sel != nil && sel.Role() == superpeer.Superpeer {
			sps = append(sps, i)
		}
	}
	if len(sps) == 0 {
		return -1
	}
	return sps[rng.Intn(len(sps))]
}

// PickFraction chooses a fraction of the live peers at random.
func (v *View) PickFraction(f float64, rng *rand.Rand) []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	live := v.s.Live()
	rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
	out := live[:min(len(live), int(f*float64(len(live))+0.5))]
	sort.Ints(out)
	return out
}

// Snapshot reads the swarm now.
func (v *View) Snapshot() Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.noteDeaths("")
	v.noteHolders()
	s := v.s
	live := s.Live()
	snap := Snapshot{Mode: "swarm", Self: -1, T: round(time.Since(v.start).Seconds(), 1000), Stage: v.stage, Ready: v.ready,
		N: len(s.Peers), Live: len(live), Killed: 0}
	for i := range s.Peers {
		if s.dead[i].Load() {
			snap.Killed++
		}
	}

	// Coordinates, projected on the two axes of most spread.
	xy := make([][3]float64, len(s.Peers))
	has := make([]bool, len(s.Peers))
	var coords []vivaldi.Coord // of the live peers with one, in order of idx
	var idx []int
	if v.vr != nil {
		var vecs [][]float64
		for _, i := range live {
			c := v.vr.Coord(i)
			if len(c.Vec) > 0 {
				idx = append(idx, i)
				coords = append(coords, c)
				vecs = append(vecs, c.Vec)
			}
		}
		pts, axes, kept := Project(vecs, v.axes)
		v.axes, snap.Spread = axes, round(kept, 1000)
		for k, i := range idx {
			xy[i], has[i] = [3]float64{pts[k][0], pts[k][1], coords[k].Height * 1000}, true
			v.lastXY[i] = pts[k]
		}
	}

	// Roles and links.
	var (
		st       RunState
		rst      RepelState
		scheme   superpeer.Prefix
		isPrefix bool
	)
	if v.run != nil {
		snap.Method = v.run.m.Name
		snap.Capacity = v.run.capacity
		if v.rr != nil {
			rst = v.rr.State()
			st = RunState{Superpeers: rst.Superpeers, Assignment: rst.Assignment, Wrong: rst.Wrong, Unserved: rst.Unserved}
			snap.Target = rst.Count
		} else {
			st = v.run.State()
			snap.Target = v.run.o.Env.Superpeers
		}
		for _, i := range live {
			if p, ok := v.run.sels[i].(*superpeer.PrefixSelector); ok {
				scheme, isPrefix = p.Scheme(), true
				snap.Target = scheme.Groups()
				break
			}
		}
		if snap.Target == 0 {
			snap.Target = len(st.Superpeers)
		}
		snap.Superpeers = len(st.Superpeers)
	}
	holding := map[int]uint32{}
	for id, hs := range v.holders {
		for _, h := range hs {
			holding[h] = id
		}
	}
	snap.Peers = make([]PeerView, 0, len(s.Peers))
	for i, p := range s.Peers {
		if s.held[i].Load() || p.Remote {
			continue
		}
		id := p.ID.String()
		pv := PeerView{I: i, ID: id[max(0, len(id)-6):], K: round(keyFraction(p.Key), 1e6), SP: -1, G: -1, Role: "unknown"}
		if c, ok := xy[i], has[i]; ok {
			pv.Pos, pv.X, pv.Y, pv.H = true, round(c[0], 10), round(c[1], 10), round(c[2], 10)
		} else if c, ok := v.lastXY[i]; ok {
			pv.Pos, pv.X, pv.Y = true, round(c[0], 10), round(c[1], 10)
		}
		if isPrefix {
			pv.G = scheme.Group(p.Key)
		}
		switch {
		case s.dead[i].Load():
			pv.Role = "dead"
		case v.run == nil || v.run.sels[i] == nil:
		case st.Assignment[i] == i:
			pv.Role, pv.SP = "superpeer", i
		case st.Assignment[i] >= 0:
			pv.Role, pv.SP = "client", st.Assignment[i]
		default:
			if _, ok := holding[i]; ok {
				pv.Role = "holder"
			} else if v.run.sels[i].Role() != superpeer.Unknown {
				pv.Role = "unserved"
			}
		}
		snap.Peers = append(snap.Peers, pv)
	}
	if v.run == nil {
		v.figures(&snap, live, nil, 0, idx, coords)
		snap.Events = append([]Event(nil), v.events...)
		return snap
	}

	// Loads.
	for _, i := range st.Superpeers {
		snap.Loads = append(snap.Loads, LoadView{SP: i, Load: v.run.sels[i].Attach().Load(), Capacity: snap.Capacity})
	}
	// Tokens.
	if v.rr != nil {
		for id := uint32(0); id < uint32(rst.Count); id++ {
			tv := TokenView{ID: id, Holder: -1, Trail: append([]int{}, v.trails[id]...)}
			if hs := v.holders[id]; len(hs) > 0 {
				tv.Holders = append([]int(nil), hs...)
				tv.Holder = hs[0]
				if t, ok := v.rr.sels[hs[0]].Held(); ok {
					tv.Epoch = t.Epoch
				}
				tv.Settled = v.rr.sels[hs[0]].Role() == superpeer.Superpeer
			}
			snap.Tokens = append(snap.Tokens, tv)
		}
	}
	// Prefix groups.
	if isPrefix {
		expected := s.ExpectedSuperpeers(scheme)
		members := map[int]int{}
		for _, i := range live {
			members[scheme.Group(s.Peers[i].Key)]++
		}
		spOf := map[int]int{}
		for _, i := range st.Superpeers {
			g := scheme.Group(s.Peers[i].Key)
			if _, ok := spOf[g]; !ok {
				spOf[g] = i
			}
		}
		for g := 0; g < scheme.Groups(); g++ {
			gv := GroupView{G: g, Start: keyFraction(scheme.GroupKey(g)), Share: scheme.Share(g), SP: -1, Expected: -1, Members: members[g]}
			if i, ok := spOf[g]; ok {
				gv.SP = i
			}
			if i, ok := expected[g]; ok {
				gv.Expected = i
			}
			snap.Groups = append(snap.Groups, gv)
		}
	}
	v.figures(&snap, live, st.Assignment, snap.Target, idx, coords)
	snap.Figures.Wrong = st.Wrong
	snap.Events = append([]Event(nil), v.events...)
	return snap
}

// figures fills the live figures; a is the current assignment (nil: no
// method), coords[k] the coordinate of peer idx[k].
func (v *View) figures(snap *Snapshot, live []int, a metrics.Assignment, S int, idx []int, coords []vivaldi.Coord) {
	s := v.s
	f := &snap.Figures
	if a != nil {
		var sum float64
		for _, i := range live {
			switch j := a[i]; {
			case j == i:
			case j >= 0:
				sum += s.RTT(i, j)
				f.Served++
			default:
				f.Unserved++
			}
		}
		if f.Served > 0 {
			f.ClientRTT = round(sum/float64(f.Served), 10)
		}
		if S > 0 && len(live) > S {
			if v.yard.live != len(live) || v.yard.S != S || v.yard.capacity != snap.Capacity {
				v.yard = yardsticks{live: len(live), S: S, capacity: snap.Capacity}
				if rb, err := s.RandomBaseline(S, snap.Capacity, rand.New(rand.NewSource(s.cfg.Seed+3))); err == nil {
					v.yard.random = rb.ClientRTT.Mean
				}
				l := s.liveSpace()
				km := metrics.GreedyKMedian(l, S)
				if kev, err := metrics.Evaluate(l, metrics.AssignWithCapacity(l, km, snap.Capacity), km, snap.Capacity); err == nil {
					v.yard.kmedian = kev.ClientRTT.Mean
				}
			}
			f.RandomRTT, f.KMedianRTT = round(v.yard.random, 10), round(v.yard.kmedian, 10)
		}
	}
	if v.vr != nil {
		f.VivaldiMedian, f.VivaldiP90 = v.sampledError(idx, coords)
	}
	// Messages sent, summed over the live peers.
	t := s.Traffic()
	total := t.KadRequests + t.ClosestRequests + t.AttachRequests
	if v.vr != nil {
		for _, i := range live {
			if svc := v.vr.svcs[i]; svc != nil {
				total += svc.Stats().Samples
			}
		}
	}
	if v.rr != nil {
		sums := map[string]uint64{}
		for _, i := range live {
			if sel := v.rr.sels[i]; sel != nil {
				for k, x := range sel.Stats() {
					sums[k] += x
				}
			}
		}
		total += sums["announce_sent"] + sums["move_frames_sent"] + sums["survey_frames_sent"]
		f.Fenced, f.Minted, f.Moves = sums[repel.EventFenced.String()], sums[repel.EventMinted.String()], sums[repel.EventAccepted.String()]
		if v.repelSum != nil {
			if d := f.Fenced - min(f.Fenced, v.repelSum[repel.EventFenced.String()]); d > 0 {
				v.event(Event{Kind: "fenced", Count: d})
			}
			if d := f.Minted - min(f.Minted, v.repelSum[repel.EventMinted.String()]); d > 0 {
				v.event(Event{Kind: "minted", Count: d})
			}
		}
		v.repelSum = sums
	}
	now := time.Now()
	// After a kill the dead peers' counters drop out of the sums: measure
	// only between snapshots over the same live peers.
	if m := v.rate; !m.at.IsZero() && m.live == len(live) && total >= m.total {
		if secs := s.Network(now.Sub(m.at)).Seconds(); secs > 0 {
			f.MsgsPerPeerSec = round(float64(total-m.total)/float64(max(len(live), 1))/secs, 100)
		}
	}
	v.rate = rateMark{at: now, total: total, live: len(live)}
}

// sampledError is the coordinates' median and p90 relative error (coords[k]
// is peer idx[k]'s) over random pairs of live peers (all pairs below ~90
// peers).
func (v *View) sampledError(idx []int, coords []vivaldi.Coord) (median, p90 float64) {
	if len(idx) < 2 {
		return 0, 0
	}
	errs := make([]float64, 0, errorPairs)
	add := func(a, b int) {
		if d := v.s.RTT(idx[a], idx[b]); d > 0 {
			errs = append(errs, math.Abs(coords[a].DistanceTo(coords[b])*1000-d)/d)
		}
	}
	if len(idx)*(len(idx)-1)/2 <= errorPairs {
		for a := range idx {
			for b := a + 1; b < len(idx); b++ {
				add(a, b)
			}
		}
	} else {
		rng := rand.New(rand.NewSource(int64(len(idx))))
		for range errorPairs {
			if a, b := rng.Intn(len(idx)), rng.Intn(len(idx)); a != b {
				add(a, b)
			}
		}
	}
	if len(errs) == 0 {
		return 0, 0
	}
	p := metrics.Percentiles(errs, 0.5, 0.9)
	return round(p[0], 1000), round(p[1], 1000)
}

// keyFraction is a key's place in the key space, in [0, 1).
func keyFraction(k dht.Key) float64 {
	return float64(binary.BigEndian.Uint64(k[:8])>>11) / (1 << 53)
}

// KeyFraction is a key's place in the key space, in [0, 1): the angle on
// the map's key ring.
func KeyFraction(k dht.Key) float64 { return keyFraction(k) }

func round(x, unit float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*unit) / unit
}

// Project maps vectors (seconds) to 2-D (ms) on their two principal axes:
// the plane that keeps most of their spread. prev are the axes of the last
// projection (nil at first): the new ones are ordered and signed to match
// them, so that the picture does not flip between snapshots. It returns
// the points, the axes, and the share of the variance the plane keeps.
func Project(vecs [][]float64, prev [2][]float64) (pts [][2]float64, axes [2][]float64, kept float64) {
	pts = make([][2]float64, len(vecs))
	if len(vecs) == 0 {
		return pts, prev, 0
	}
	d := len(vecs[0])
	for _, x := range vecs {
		d = min(d, len(x))
	}
	if d == 0 {
		return pts, prev, 0
	}
	mean := make([]float64, d)
	for _, x := range vecs {
		for k := range d {
			mean[k] += x[k] / float64(len(vecs))
		}
	}
	cov := make([][]float64, d)
	for a := range cov {
		cov[a] = make([]float64, d)
	}
	for _, x := range vecs {
		for a := range d {
			da := x[a] - mean[a]
			for b := a; b < d; b++ {
				cov[a][b] += da * (x[b] - mean[b])
			}
		}
	}
	trace := 0.0
	for a := range d {
		for b := a; b < d; b++ {
			cov[a][b] /= float64(len(vecs))
			cov[b][a] = cov[a][b]
		}
		trace += cov[a][a]
	}
	lambda := [2]float64{}
	for k := range 2 {
		e := make([]float64, d)
		if len(prev[k]) == d {
			copy(e, prev[k])
		} else if k < d {
			e[k] = 1
		}
		// Power iteration on the deflated covariance; a start with no
		// weight on the top axis gets it from the rounding of the
		// products, and a few hundred rounds are microseconds at d = 8.
		for range 300 {
			n := make([]float64, d)
			for a := range d {
				for b := range d {
					n[a] += cov[a][b] * e[b]
				}
			}
			if k == 1 {
				dot := 0.0
				for a := range d {
					dot += n[a] * axes[0][a]
				}
				for a := range d {
					n[a] -= dot * axes[0][a]
				}
			}
			norm := 0.0
			for a := range d {
				norm += n[a] * n[a]
			}
			norm = math.Sqrt(norm)
			if norm == 0 {
				e = unitAway(d, axes[0], k)
				break
			}
			for a := range d {
				n[a] /= norm
			}
			e = n
		}
		axes[k] = e
		for a := range d {
			for b := range d {
				lambda[k] += e[a] * cov[a][b] * e[b]
			}
		}
	}
	if lambda[1] > lambda[0] {
		axes[0], axes[1] = axes[1], axes[0]
		lambda[0], lambda[1] = lambda[1], lambda[0]
	}
	dot := func(a, b []float64) float64 {
		s := 0.0
		for k := range min(len(a), len(b)) {
			s += a[k] * b[k]
		}
		return s
	}
	if len(prev[0]) == d && len(prev[1]) == d {
		if math.Abs(dot(axes[0], prev[1]))+math.Abs(dot(axes[1], prev[0])) > math.Abs(dot(axes[0], prev[0]))+math.Abs(dot(axes[1], prev[1])) {
			axes[0], axes[1] = axes[1], axes[0]
		}
		for k := range 2 {
			if dot(axes[k], prev[k]) < 0 {
				for a := range axes[k] {
					axes[k][a] = -axes[k][a]
				}
			}
		}
	}
	for i, x := range vecs {
		for k := range 2 {
			p := 0.0
			for a := range d {
				p += (x[a] - mean[a]) * axes[k][a]
			}
			pts[i][k] = p * 1000
		}
	}
	if trace > 0 {
		kept = min(1, (lambda[0]+lambda[1])/trace)
	}
	return pts, axes, kept
}

// unitAway is a unit vector of d dimensions orthogonal to first (for the
// second axis, k = 1) when the spread leaves no direction to follow.
func unitAway(d int, first []float64, k int) []float64 {
	e := make([]float64, d)
	if k == 0 || len(first) != d {
		e[0] = 1
		return e
	}
	j := 0
	for a := range d {
		if math.Abs(first[a]) < math.Abs(first[j]) {
			j = a
		}
	}
	e[j] = 1
	norm := 0.0
	for a := range d {
		e[a] -= first[j] * first[a]
		norm += e[a] * e[a]
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		e[0] = 1
		return e
	}
	for a := range d {
		e[a] /= norm
	}
	return e
}
