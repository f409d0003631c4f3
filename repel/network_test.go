package repel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// network is a deliberately naive in-memory network for whole-cluster tests,
// after etcd raft's: it delivers, drops, duplicates and reorders messages
// with seeded randomness, and can kill peers. It checks invariants as it goes.
type network struct {
	t     testing.TB
	cfg   Config
	rng   *rand.Rand
	now   time.Time
	ids   []string
	nodes map[string]*Node
	coord map[string]vivaldi.Coord
	dead  map[string]bool
	queue []Message

	drop, dup float64 // per copy
	reorder   bool
	group     map[string]int // when set, messages cross no group boundary
	attach    bool           // peers attach to the nearest holder; holders learn their clients
	rounds    int
	digests   int               // announcements that carried a client digest
	probes    int               // holders' RTT probes, answered with the coordinate distance
	oneSite   map[string]string // pairs of peers that measure 0.2 ms apart, whatever their coordinates

	minted  map[uint32]bool // token IDs ever minted
	retired map[uint32]int  // token IDs retired (Config.Fraction), how often
	events  map[EventKind]int
	moves   int // completed moves (acks that made a holder drop)
}

var epoch0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig has short timers so that a test covers many periods quickly.
func testConfig(s int, m Model) Config {
	c := DefaultConfig()
	c.Tokens = s
	c.Model = m
	c.MoveInterval = time.Second
	c.MoveTimeout = time.Second
	c.AnnounceInterval = 3 * time.Second
	c.MovingAnnounceInterval = time.Second
	c.SettleAfter = 5 * time.Second
	c.DeadAfter = 10 * time.Second
	return c
}

// randomCoords places n peers uniformly in a 100 ms square with 1–5 ms
// heights: a static space.
func randomCoords(rng *rand.Rand, n int) []vivaldi.Coord {
	out := make([]vivaldi.Coord, n)
	for i := range out {
		out[i] = vivaldi.Coord{
			Vec:    []float64{rng.Float64() * 0.1, rng.Float64() * 0.1},
			Height: 0.001 + rng.Float64()*0.004,
		}
	}
	return out
}

func newNetwork(t testing.TB, cfg Config, n int, seed uint64) *network {
	rng := rand.New(rand.NewPCG(seed, 1))
	nw := &network{
		t: t, cfg: cfg, rng: rng, now: epoch0,
		nodes: map[string]*Node{}, coord: map[string]vivaldi.Coord{}, dead: map[string]bool{},
		minted: map[uint32]bool{}, retired: map[uint32]int{}, events: map[EventKind]int{},
	}
	coords := randomCoords(rng, n)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("peer-%03d", i)
		nd, err := NewNode(id, PeerKey(id), cfg, rand.New(rand.NewPCG(seed, uint64(i)+2)))
		if err != nil {
			t.Fatal(err)
		}
		nd.SetCoord(coords[i])
		nw.ids = append(nw.ids, id)
		nw.nodes[id] = nd
		nw.coord[id] = coords[i]
	}
	nw.tellPeers()
	return nw
}

// tellPeers gives every live node the full live set, as a perfect failure
// detector would.
func (nw *network) tellPeers() {
	var peers []Peer
	for _, id := range nw.ids {
		if !nw.dead[id] {
			peers = append(peers, Peer{ID: id, Key: PeerKey(id), Coord: nw.coord[id]})
		}
	}
	for _, id := range nw.ids {
		if !nw.dead[id] {
			nw.nodes[id].SetPeers(peers)
		}
	}
}

func (nw *network) kill(id string) { nw.dead[id] = true }

// partition splits the live peers into two halves that cannot talk, and
// tells each side that the other is gone; heal undoes it.
func (nw *network) partition() {
	nw.group = map[string]int{}
	live := nw.live()
	for i, id := range live {
		nw.group[id] = i % 2
	}
	for _, id := range live {
		var peers []Peer
		for _, p := range live {
			if nw.group[p] == nw.group[id] {
				peers = append(peers, Peer{ID: p, Key: PeerKey(p), Coord: nw.coord[p]})
			}
		}
		nw.nodes[id].SetPeers(peers)
	}
}

func (nw *network) heal() {
	nw.group = nil
	nw.tellPeers()
}

func (nw *network) live() []string {
	var out []string
	for _, id := range nw.ids {
		if !nw.dead[id] {
			out = append(out, id)
		}
	}
	return out
}

func (nw *network) absorb(from string, r Ready) {
	for _, e := range r.Events {
		nw.events[e.Kind]++
		switch e.Kind {
		case EventMinted:
			nw.minted[e.Token.ID] = true
		case EventMovedAway:
			nw.moves++
		case EventRetired:
			nw.retired[e.Token.ID]++
		}
	}
	// The space is static and its coordinates are the truth: a probe
	// measures the coordinate distance, at once.
	for _, id := range r.Probes {
		nw.probes++
		d := nw.coord[from].DistanceTo(nw.coord[id])
		if nw.oneSite[from] == id || nw.oneSite[id] == from {
			d = 0.0002
		}
		nw.nodes[from].Measured(nw.now, id, time.Duration(d*float64(time.Second)), !nw.dead[id])
	}
	for _, m := range r.Messages {
		if m.From != from {
			nw.t.Fatalf("message from %s carries From %q", from, m.From)
		}
		if m.Type == MsgAnnounce && len(m.Token.Digest) > 0 {
			nw.digests++
		}
		nw.queue = append(nw.queue, m)
	}
	nw.check()
}

// round advances the clock by dt, ticks every live node, then delivers what
// was in flight at the start of the round (in random order if reorder).
func (nw *network) round(dt time.Duration) {
	nw.now = nw.now.Add(dt)
	nw.rounds++
	if nw.attach && nw.group == nil && nw.rounds%4 == 0 {
		nw.attachClients()
	}
	for _, id := range nw.live() {
		nw.absorb(id, nw.nodes[id].Tick(nw.now))
	}
	nw.deliver()
}

// attachClients attaches every live peer to the holder nearest to it and
// tells each node its peers with those it serves marked Attached, so that
// holders send client digests.
func (nw *network) attachClients() {
	var hs []string
	for _, id := range nw.live() {
		if _, ok := nw.nodes[id].Held(); ok {
			hs = append(hs, id)
		}
	}
	served := map[string]string{}
	for _, c := range nw.live() {
		best := ""
		for _, h := range hs {
			if best == "" || nw.coord[c].DistanceTo(nw.coord[h]) < nw.coord[c].DistanceTo(nw.coord[best]) {
				best = h
			}
		}
		served[c] = best
	}
	for _, id := range nw.live() {
		var peers []Peer
		for _, p := range nw.live() {
			peers = append(peers, Peer{ID: p, Key: PeerKey(p), Coord: nw.coord[p], Attached: served[p] == id && p != id})
		}
		nw.nodes[id].SetPeers(peers)
	}
}

// deliver hands every message in flight to its receivers (subject to the
// faults); what they answer stays in flight for the next delivery.
func (nw *network) deliver() {
	batch := nw.queue
	nw.queue = nil
	type delivery struct {
		to string
		m  Message
	}
	var ds []delivery
	for _, m := range batch {
		var dst []string
		if m.To == "" {
			for _, id := range nw.ids {
				if id != m.From {
					dst = append(dst, id)
				}
			}
		} else {
			dst = []string{m.To}
		}
		for _, d := range dst {
			if nw.dead[d] || nw.rng.Float64() < nw.drop {
				continue
			}
			if nw.group != nil && nw.group[d] != nw.group[m.From] {
				continue
			}
			ds = append(ds, delivery{d, m})
			if nw.rng.Float64() < nw.dup {
				ds = append(ds, delivery{d, m})
			}
		}
	}
	if nw.reorder {
		nw.rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	}
	for _, d := range ds {
		if nw.dead[d.to] {
			continue
		}
		r, err := nw.nodes[d.to].Step(nw.now, d.m)
		if err != nil {
			nw.t.Fatalf("%s stepping %v from %s: %v", d.to, d.m.Type, d.m.From, err)
		}
		nw.absorb(d.to, r)
	}
}

// settle delivers everything in flight, round after round, without the
// clock moving, until the network is quiet.
func (nw *network) quiesce() {
	for i := 0; len(nw.queue) > 0; i++ {
		if i > 1000 {
			nw.t.Fatal("network does not quiesce")
		}
		nw.deliver()
	}
}

// holders maps each token ID to the live nodes holding a version of it.
func (nw *network) holders() map[uint32][]string {
	h := map[uint32][]string{}
	for _, id := range nw.live() {
		if t, ok := nw.nodes[id].Held(); ok {
			h[t.ID] = append(h[t.ID], id)
		}
	}
	return h
}

// check holds at every step: a node's held token is in range, names it as
// holder, and (with no peer dead) every token ever minted is held by someone
// — a move or a fencing never loses one.
func (nw *network) check() {
	h := nw.holders()
	for id, hs := range h {
		for _, p := range hs {
			if int(id) >= nw.nodes[p].Count().S {
				nw.t.Fatalf("token %d out of range held by %s (count %d)", id, p, nw.nodes[p].Count().S)
			}
			if t, _ := nw.nodes[p].Held(); t.Holder != p {
				nw.t.Fatalf("%s holds token %d naming %s", p, id, t.Holder)
			}
		}
	}
	if len(nw.dead) == 0 {
		for id := range nw.minted {
			if len(h[id]) == 0 && nw.retired[id] == 0 {
				nw.t.Fatalf("t=%v: token %d lost (minted, now held by no one)", nw.now.Sub(epoch0), id)
			}
		}
	}
}

// exactlyS reports whether every token is held by exactly one live node.
func (nw *network) exactlyS() bool {
	h := nw.holders()
	if s := nw.count(); s < 0 || len(h) != s {
		return false
	}
	for _, hs := range h {
		if len(hs) != 1 {
			return false
		}
	}
	return true
}

// count is the token count every live node holds (Config.Tokens without
// a Fraction), or -1 while they differ.
func (nw *network) count() int {
	s := -1
	for _, id := range nw.live() {
		c := nw.nodes[id].Count().S
		if s >= 0 && c != s {
			return -1
		}
		s = c
	}
	return s
}

func (nw *network) noDuplicates() error {
	for id, hs := range nw.holders() {
		if len(hs) > 1 {
			slices.Sort(hs)
			return fmt.Errorf("token %d held by %v", id, hs)
		}
	}
	return nil
}

// tokenCoords are the positions of the held tokens, one per ID.
func (nw *network) tokenCoords() []vivaldi.Coord {
	var out []vivaldi.Coord
	h := nw.holders()
	for id := uint32(0); id < uint32(nw.cfg.Tokens); id++ {
		if hs := h[id]; len(hs) > 0 {
			out = append(out, nw.coord[hs[0]])
		}
	}
	return out
}

func (nw *network) allCoords() []vivaldi.Coord {
	var out []vivaldi.Coord
	for _, id := range nw.live() {
		out = append(out, nw.coord[id])
	}
	return out
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
