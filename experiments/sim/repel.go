package sim

import (
	"bytes"
	"errors"
	"fmt"
	randv2 "math/rand/v2"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/internal/census"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// RepelOptions describe a simulation of the token method.
type RepelOptions struct {
	RTT latency.RTTs
	// Coords are the peers' Vivaldi coordinates (from SimulateVivaldi),
	// held fixed during the run (but for Later): the tokens move in an
	// embedding that has converged.
	Coords []vivaldi.Coord
	// Later, if set, are the coordinates of later times, in ascending
	// order of At: from each stage's At on, every peer has that stage's
	// coordinates (each of length len(IDs)), as a live swarm's Vivaldi
	// keeps sampling, and its error falling, while the tokens move.
	Later []CoordStage
	// Neighbors are each peer's Vivaldi neighbours, the peers it knows with
	// coordinates.
	Neighbors [][]int32
	// IDs name the peers (string(peer.ID), or any distinct strings); a
	// peer's key is repel.PeerKey(ID).
	IDs    []string
	Config repel.Config
	Seed   int64
	// Minters is M: the M XOR-closest peers to each token's name run a node
	// from the start and know each other, as a DHT lookup of the name
	// would tell them (default 3).
	Minters int
	// TickEvery is how often every running node is ticked (default 1 s).
	TickEvery time.Duration
	// ViewEvery is how often clients renew or remake their attachment
	// (Attach) and holders learn their attached clients (default 15 s).
	ViewEvery time.Duration
	// Attach is how clients choose a holder: AttachSelector (the default)
	// mirrors repel.Selector, AttachPredicted is the earlier rule (the
	// predicted-nearest holder, no capacity, no measurement).
	Attach AttachRule
	// Capacity is C, the most clients a holder accepts under
	// AttachSelector (0: unbounded).
	Capacity int
	// Displace is the holders' superpeer.WithDisplace under
	// AttachSelector: a full holder takes a newcomer in place of its
	// client of least regret (repel.Regret) when the newcomer's exceeds it
	// by more than Displace (0: first come, first served).
	Displace time.Duration
	// Choose is the clients' repel.Chooser under AttachSelector (zero:
	// repel.DefaultAttachConfig() with ProbeEvery 5 × ViewEvery, the
	// selector's five renewals).
	Choose repel.AttachConfig
	// Dissemination is how the traffic of announcements is counted
	// (RepelTraffic): repel.Piggyback, the selector's default, or
	// repel.GossipSub. Announcements reach every running node one link
	// latency after they are sent either way (but for NewsLag).
	Dissemination repel.Dissemination
	// NewsLag, if set, holds back a share of the announcements' deliveries
	// (each node's copy of each announcement, drawn with the run's seed)
	// by a uniform extra delay in [0, Max): a live swarm's piggybacked
	// news, which reaches some peers at once and others a few Vivaldi
	// exchanges later.
	NewsLag NewsLag
	// Limit bounds the virtual time (default 30 min); Quiet is how long the
	// tokens must be settled without a move to end the run early (default
	// 2 min).
	Limit, Quiet time.Duration
	// Progress, if set, is called every ViewEvery with the virtual time.
	Progress func(now, limit time.Duration)
	// Hidden, if set, says whether node i lacks peer j's coordinate: the
	// live vivaldi.Service forgets the coordinate of a peer whose sample
	// it refused as implausible, so the selector sees j neither among
	// its Vivaldi neighbours nor with a coordinate among the minters (an
	// attached client's comes with its attach requests).
	Hidden func(i, j int) bool
	// Tamper, if set, may change every message node i sends before it
	// goes out: simulated liars (report_liars.go).
	Tamper func(i int, m *repel.Message)
	// Watch, if set, sees every event of node i.
	Watch func(i int, e repel.Event)
	// RegretLiars, if set, marks the clients that claim the largest
	// regret (no other choice) in every attach request under
	// AttachSelector, to displace the clients of full holders.
	RegretLiars []bool
}

// NewsLag is RepelOptions.NewsLag: Share of the deliveries held back by up
// to Max.
type NewsLag struct {
	Share float64
	Max   time.Duration
}

// CoordStage is one step of RepelOptions.Later: the peers' coordinates
// from virtual time At on.
type CoordStage struct {
	At     time.Duration
	Coords []vivaldi.Coord
}

// RepelResult is the outcome of SimulateRepel.
type RepelResult struct {
	Nodes int `json:"nodes"`
	// Superpeers are the token holders at the end, ascending.
	Superpeers []int `json:"-"`
	// Assignment is every client's holder at the end: under
	// AttachSelector its attachment after a last renewal round
	// (Unassigned if every holder refused it), under AttachPredicted the
	// holder nearest in predicted RTT.
	Assignment metrics.Assignment `json:"-"`
	Settled    bool               `json:"settled"`
	// SettledAt is the virtual time at which every token was last settled
	// with no move since (the run's convergence time).
	SettledSeconds float64 `json:"settled_seconds"`
	// SurveyedSeconds is, with Config.SurveyInterval, the virtual time
	// from which every holder's place had also been kept by its surveys,
	// with no move since: when `peer swarm`'s selection counts as
	// converged (swarm.RepelState.Converged). Without surveys it is
	// SettledSeconds.
	SurveyedSeconds float64 `json:"surveyed_seconds"`
	VirtualSeconds  float64 `json:"virtual_seconds"`
	// Running counts the peers that ever ran a node.
	Running int `json:"running_nodes"`
	// Count is the token count the running nodes agree on at the end (0
	// if they differ): Config.Tokens, or the census's with a Fraction.
	Count      int            `json:"count"`
	Events     map[string]int `json:"events"`
	Messages   map[string]int `json:"messages"`
	Deliveries uint64         `json:"deliveries"`
	// Probes are the RTT measurements the nodes asked for: holders' of
	// other holders and of their attached clients (repel.Config.ProbeTTL),
	// and survey candidates' of the peers a survey lists
	// (repel.Config.SurveyInterval); one Vivaldi exchange each in the live
	// selector, not counted in Traffic; answered with the true RTT.
	Probes     int    `json:"holder_probes"`
	StepErrors int    `json:"step_errors"`
	LoopEvents uint64 `json:"loop_events"`
	// Traffic is the token protocol's traffic; Attach what the clients did
	// (AttachSelector only).
	Traffic RepelTraffic `json:"traffic"`
	Attach  AttachStats  `json:"attach"`
}

var epoch0 = time.Unix(1_700_000_000, 0).UTC()

type repelSim struct {
	o          RepelOptions
	net        *Net
	keys       []repel.Key
	index      map[string]int
	nodes      []*repel.Node
	running    []int
	base       []repel.Peer // what every node knows from the DHT: the minters
	attached   map[int][]int
	latest     []repel.Message // freshest announcement per token
	hasLast    []bool
	res        *RepelResult
	lastMove   time.Duration
	settled    time.Duration // -1 while not settled
	surveyed   time.Duration // -1 while not settled and surveyed
	done       bool
	minter     []bool
	mintersFor int             // the tokens whose minters run: [0, mintersFor)
	rest       *census.Config  // under a Fraction: the band a settled count lies in
	isOn       []bool          // in running
	lastHeld   []time.Duration // when the node last held a token
	att        *attacher       // AttachSelector
	order      *randv2.Rand    // the clients' order in each attach round
	settledT   [2]uint64       // traffic totals when the tokens last settled
	lag        *randv2.Rand    // NewsLag's draws
}

// SimulateRepel runs the repel model (repel.Node) on every peer over the
// latency space on virtual time. See the package doc for what is
// simplified.
func SimulateRepel(o RepelOptions) (*RepelResult, error) {
	n := len(o.IDs)
	switch {
	case o.RTT == nil || o.RTT.Len() < n || n < 2:
		return nil, errors.New("sim: repel needs an RTT space covering at least 2 peers")
	case len(o.Coords) != n || len(o.Neighbors) != n:
		return nil, fmt.Errorf("sim: repel: %d IDs, %d coords, %d neighbour sets", n, len(o.Coords), len(o.Neighbors))
	case o.Config.Tokens > n:
		return nil, fmt.Errorf("sim: repel: %d tokens for %d peers", o.Config.Tokens, n)
	case !stagesOK(o.Later, n):
		return nil, fmt.Errorf("sim: repel: later coordinates must have %d coordinates each, in ascending order of time", n)
	case !(o.NewsLag.Share >= 0 && o.NewsLag.Share <= 1) || o.NewsLag.Max < 0:
		return nil, fmt.Errorf("sim: repel: news lag share %v not in [0, 1] or max %v negative", o.NewsLag.Share, o.NewsLag.Max)
	case o.Config.Fraction > 0 && o.Config.MaxTokens > n:
		return nil, fmt.Errorf("sim: repel: up to %d tokens for %d peers", o.Config.MaxTokens, n)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Minters <= 0 {
		o.Minters = 3
	}
	if o.TickEvery <= 0 {
		o.TickEvery = time.Second
	}
	if o.ViewEvery <= 0 {
		o.ViewEvery = 15 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 30 * time.Minute
	}
	if o.Quiet <= 0 {
		o.Quiet = 2 * time.Minute
	}
	if o.Config.Capacity == 0 && o.Attach == AttachSelector {
		o.Config.Capacity = o.Capacity // as repel.Selector does from its attach options
	}
	if o.Choose == (repel.AttachConfig{}) {
		o.Choose = repel.DefaultAttachConfig()
		o.Choose.ProbeEvery = 5 * o.ViewEvery
		o.Choose.ExploreEvery = o.Choose.ProbeEvery
	}
	switch {
	case o.Attach != AttachSelector && o.Attach != AttachPredicted:
		return nil, fmt.Errorf("sim: repel: unknown attach rule %d", o.Attach)
	case o.Capacity < 0:
		return nil, fmt.Errorf("sim: repel: capacity %d must be ≥ 0", o.Capacity)
	}
	// The stages overwrite the coordinates in place (the attacher shares
	// the slice): a copy, not the caller's.
	o.Coords = append([]vivaldi.Coord(nil), o.Coords...)
	s := &repelSim{
		o: o, net: NewNet(o.RTT), index: make(map[string]int, n),
		keys: make([]repel.Key, n), nodes: make([]*repel.Node, n),
		latest: make([]repel.Message, o.Config.Tokens), hasLast: make([]bool, o.Config.Tokens),
		res:      &RepelResult{Nodes: n, Events: map[string]int{}, Messages: map[string]int{}},
		settled:  -1,
		surveyed: -1,
	}
	s.res.Traffic = newRepelTraffic()
	if o.Attach == AttachSelector {
		var err error
		if s.att, err = newAttacher(o.RTT, o.Coords, o.IDs, o.Capacity, o.Displace, o.Choose); err != nil {
			return nil, err
		}
		s.att.liars = o.RegretLiars
		s.order = randv2.New(randv2.NewPCG(uint64(o.Seed), 0xa77ac4))
	}
	if o.NewsLag.Share > 0 && o.NewsLag.Max > 0 {
		s.lag = randv2.New(randv2.NewPCG(uint64(o.Seed), 0x1a6))
	}
	for i, id := range o.IDs {
		s.keys[i] = repel.PeerKey(id)
		if _, dup := s.index[id]; dup {
			return nil, fmt.Errorf("sim: repel: peer ID %q twice", id)
		}
		s.index[id] = i
	}
	s.minter = make([]bool, n)
	s.isOn = make([]bool, n)
	s.lastHeld = make([]time.Duration, n)
	if f := o.Config.Fraction; f > 0 {
		cc, err := census.Config{Fraction: f}.Filled()
		if err != nil {
			return nil, err
		}
		s.rest = &cc
	}
	if err := s.addMinters(o.Config.Tokens); err != nil {
		return nil, err
	}
	var tick func()
	tick = func() {
		now := s.now()
		for _, i := range s.running {
			s.handle(i, s.nodes[i].Tick(now))
		}
		if c, _ := s.count(); c.S > s.mintersFor {
			if err := s.addMinters(c.S); err != nil {
				s.res.StepErrors++
			}
		}
		s.park()
		s.check()
		if !s.done {
			s.net.After(o.TickEvery, tick)
		}
	}
	var view func()
	view = func() {
		s.views()
		if o.Progress != nil {
			o.Progress(s.net.Now(), o.Limit)
		}
		if !s.done {
			s.net.After(o.ViewEvery, view)
		}
	}
	s.net.At(0, tick)
	s.net.At(o.ViewEvery/2, view)
	for _, st := range o.Later {
		s.net.At(st.At, func() { s.recoord(st.Coords) })
	}
	s.net.RunWhile(o.Limit, func() bool { return !s.done })
	r := s.res
	r.Superpeers = s.holders()
	if s.att != nil {
		s.attachRound(r.Superpeers)
		r.Assignment = s.att.assignment(r.Superpeers)
		r.Attach = s.att.statsNow()
	} else {
		r.Assignment = AssignPredicted(o.Coords, r.Superpeers)
	}
	r.Traffic.finish(s.settled, s.settledT, s.net.Now())
	r.Settled = s.done
	if s.settled >= 0 {
		r.SettledSeconds = s.settled.Seconds()
	}
	if s.surveyed >= 0 {
		r.SurveyedSeconds = s.surveyed.Seconds()
	}
	r.VirtualSeconds = s.net.Now().Seconds()
	if c, agreed := s.count(); agreed {
		r.Count = c.S
	}
	for _, nd := range s.nodes {
		if nd != nil {
			r.Running++
		}
	}
	r.LoopEvents = s.net.Processed
	return r, nil
}

func (s *repelSim) now() time.Time { return epoch0.Add(s.net.Now()) }

// stagesOK says whether later coordinate stages cover n peers each, in
// ascending order of time.
func stagesOK(later []CoordStage, n int) bool {
	for k, st := range later {
		if len(st.Coords) != n || k > 0 && st.At < later[k-1].At {
			return false
		}
	}
	return true
}

// recoord gives every peer its coordinate of a later stage: the running
// nodes their own and their views' (the minters' included), the attacher
// the clients' and holders'.
func (s *repelSim) recoord(cs []vivaldi.Coord) {
	copy(s.o.Coords, cs)
	for k := range s.base {
		s.base[k].Coord = s.o.Coords[s.index[s.base[k].ID]]
	}
	for _, i := range s.running {
		s.nodes[i].SetCoord(s.o.Coords[i])
		s.nodes[i].SetPeers(s.view(i))
	}
}

// addMinters runs, from now on, the minters of tokens up to S (their M
// XOR-closest peers each; a DHT lookup of a token's name would tell them of
// each other), and tells every running node of the new ones: a count that
// grows (Config.Fraction) has new tokens to mint.
func (s *repelSim) addMinters(S int) error {
	var added []int
	for t := s.mintersFor; t < S; t++ {
		for _, i := range closestKeys(s.keys, repel.TokenKey(uint32(t)), s.o.Minters) {
			if !s.minter[i] {
				s.minter[i] = true
				added = append(added, i)
			}
		}
	}
	old := s.mintersFor
	s.mintersFor = max(S, s.mintersFor)
	sortInts(added)
	for _, i := range added {
		s.base = append(s.base, s.peer(i))
	}
	if old > 0 && len(added) > 0 {
		for _, i := range s.running {
			s.nodes[i].SetPeers(s.view(i))
		}
	}
	for _, i := range added {
		if !s.isOn[i] {
			if err := s.start(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// count is the freshest token count a running node holds and whether every
// running node holds it (always Config.Tokens without a Fraction).
func (s *repelSim) count() (repel.Count, bool) {
	var best repel.Count
	agreed := true
	for k, i := range s.running {
		c := s.nodes[i].Count()
		if k > 0 && c != best {
			agreed = false
		}
		if k == 0 || c.Version > best.Version || c.Version == best.Version && c.S > best.S {
			best = c
		}
	}
	if len(s.running) == 0 {
		best.S = s.o.Config.Tokens
	}
	return best, agreed
}

func (s *repelSim) peer(i int) repel.Peer {
	return repel.Peer{ID: s.o.IDs[i], Key: s.keys[i], Coord: s.o.Coords[i]}
}

// view is what node i knows: the minters (from the DHT), its Vivaldi
// neighbours and, as a holder, its attached clients.
func (s *repelSim) view(i int) []repel.Peer {
	seen := map[int]bool{i: true}
	out := make([]repel.Peer, 0, len(s.base)+len(s.o.Neighbors[i])+len(s.attached[i]))
	for _, c := range s.attached[i] {
		if !seen[c] {
			seen[c] = true
			p := s.peer(c)
			p.Attached = true
			out = append(out, p)
		}
	}
	hidden := func(j int) bool { return s.o.Hidden != nil && s.o.Hidden(i, j) }
	for _, j := range s.o.Neighbors[i] {
		if !seen[int(j)] && !hidden(int(j)) {
			seen[int(j)] = true
			out = append(out, s.peer(int(j)))
		}
	}
	for _, p := range s.base {
		if j := s.index[p.ID]; !seen[j] {
			seen[j] = true
			if hidden(j) {
				p.Coord = vivaldi.Coord{}
			}
			out = append(out, p)
		}
	}
	return out
}

// start runs a node for peer i, first replaying to it the freshest
// announcement of every token: what it would have recorded had it run all
// along.
func (s *repelSim) start(i int) error {
	if s.nodes[i] != nil {
		return s.resume(i)
	}
	nd, err := repel.NewNode(s.o.IDs[i], s.keys[i], s.o.Config, randv2.New(randv2.NewPCG(uint64(s.o.Seed), uint64(i))))
	if err != nil {
		return err
	}
	nd.SetCoord(s.o.Coords[i])
	nd.SetPeers(s.view(i))
	s.nodes[i] = nd
	return s.resume(i)
}

// resume puts node i (back) in the running set and replays the freshest
// announcement of every token to it.
func (s *repelSim) resume(i int) error {
	s.running = append(s.running, i)
	s.isOn[i] = true
	s.lastHeld[i] = s.net.Now()
	for t, ok := range s.hasLast {
		if ok && s.latest[t].From != s.o.IDs[i] {
			s.step(i, s.latest[t])
		}
	}
	return nil
}

func (s *repelSim) step(i int, m repel.Message) {
	r, err := s.nodes[i].Step(s.now(), m)
	s.res.Deliveries++
	if err != nil {
		s.res.StepErrors++
		return
	}
	s.handle(i, r)
}

// handle sends a node's messages and records its events.
func (s *repelSim) handle(i int, r repel.Ready) {
	for _, e := range r.Events {
		s.res.Events[e.Kind.String()]++
		if s.o.Watch != nil {
			s.o.Watch(i, e)
		}
		if e.Kind == repel.EventMovedAway || e.Kind == repel.EventMinted || e.Kind == repel.EventFenced {
			s.lastMove = s.net.Now()
			s.unsettle()
		}
	}
	for _, id := range r.Probes {
		s.probe(i, id)
	}
	for _, m := range r.Messages {
		m.From = s.o.IDs[i]
		if s.o.Tamper != nil {
			s.o.Tamper(i, &m)
		}
		s.res.Messages[m.Type.String()]++
		s.res.Traffic.count(m, len(s.o.IDs), s.o.Config.Tokens, s.o.Dissemination)
		if m.To == "" {
			t := m.Token.ID
			for int(t) >= len(s.latest) {
				s.latest, s.hasLast = append(s.latest, repel.Message{}), append(s.hasLast, false)
			}
			if !s.hasLast[t] || !s.latest[t].Token.Beats(m.Token) {
				s.latest[t], s.hasLast[t] = m, true
			}
			for _, j := range s.running {
				if j == i {
					continue
				}
				if s.lag != nil && s.lag.Float64() < s.o.NewsLag.Share {
					d := time.Duration(s.lag.Float64() * float64(s.o.NewsLag.Max))
					s.net.After(d, func() { s.net.Send(i, j, func() { s.step(j, m) }) })
					continue
				}
				s.net.Send(i, j, func() { s.step(j, m) })
			}
			continue
		}
		j, ok := s.index[m.To]
		if !ok {
			continue
		}
		s.net.Send(i, j, func() {
			if !s.isOn[j] {
				if err := s.start(j); err != nil {
					s.res.StepErrors++
					return
				}
			}
			s.step(j, m)
		})
	}
}

// probe measures, for node i, the RTT to peer id as the live selector does
// with a Vivaldi exchange: the true RTT of the latency space, answered one
// RTT later.
func (s *repelSim) probe(i int, id string) {
	s.res.Probes++
	j, ok := s.index[id]
	d := -1.0
	if ok {
		d = s.o.RTT.RTT(i, j)
	}
	rtt := time.Duration(max(d, 0) * float64(time.Millisecond))
	s.net.After(rtt, func() { s.nodes[i].Measured(s.now(), id, rtt, d >= 0) })
}

// park stops running the nodes that only record announcements: not a
// minter, holding no token, offering none, and tokenless for two move
// timeouts. A parked node is resumed, its table refreshed by replay, when
// it is next offered a token.
func (s *repelSim) park() {
	now := s.net.Now()
	keep := s.running[:0]
	for _, i := range s.running {
		nd := s.nodes[i]
		if _, ok := nd.Held(); ok || nd.Moving() {
			s.lastHeld[i] = now
		}
		if s.minter[i] || nd.Measuring() || now-s.lastHeld[i] < 2*s.o.Config.MoveTimeout {
			keep = append(keep, i)
			continue
		}
		s.isOn[i] = false
	}
	s.running = keep
}

func (s *repelSim) holders() []int {
	var out []int
	for _, i := range s.running {
		if _, ok := s.nodes[i].Held(); ok {
			out = append(out, i)
		}
	}
	sortInts(out)
	return out
}

// unsettle marks the tokens not settled (and so not surveyed) since now:
// a move, or a check that found them not all in place.
func (s *repelSim) unsettle() { s.settled, s.surveyed = -1, -1 }

// check ends the run once every token is held once, settled (and, with
// Config.SurveyInterval, found in its place by a survey of its holder), and
// no token has moved for Quiet.
func (s *repelSim) check() {
	c, agreed := s.count()
	if !agreed || s.rest != nil && s.rest.Target(float64(len(s.o.IDs)), c.S) != c.S {
		// Under a Fraction, the nodes agree on a count the census keeps
		// for this n (f·n within its band), as peer swarm waits for.
		s.unsettle()
		return
	}
	ids := make([]bool, c.S)
	held := 0
	surveyed := true // every holder's place measured (Config.SurveyInterval)
	for _, i := range s.running {
		nd := s.nodes[i]
		t, ok := nd.Held()
		if !ok {
			continue
		}
		if int(t.ID) >= c.S || ids[t.ID] || nd.Role() != superpeer.Superpeer || nd.Moving() {
			s.unsettle()
			return
		}
		ids[t.ID] = true
		held++
		surveyed = surveyed && (s.o.Config.SurveyInterval <= 0 || nd.Surveyed())
	}
	if held != c.S {
		s.unsettle()
		return
	}
	if s.settled < 0 {
		s.settled = s.net.Now()
		s.settledT = [2]uint64{s.res.Traffic.Sends, s.res.Traffic.Bytes}
	}
	switch {
	case !surveyed:
		s.surveyed = -1
	case s.surveyed < 0:
		s.surveyed = s.net.Now()
	}
	if surveyed && s.net.Now()-s.lastMove >= s.o.Quiet && s.net.Now()-s.settled >= 0 {
		s.done = true
	}
}

// views lets every client renew or remake its attachment (o.Attach) and
// tells the holders (and those that stopped holding) whom they serve.
func (s *repelSim) views() {
	hs := s.holders()
	old := s.attached
	s.attached = map[int][]int{}
	switch {
	case s.att != nil:
		s.attachRound(hs)
		for c, h := range s.att.att {
			if h >= 0 {
				s.attached[h] = append(s.attached[h], c)
			}
		}
	case len(hs) > 0:
		a := AssignPredicted(s.o.Coords, hs)
		for c, h := range a {
			if h >= 0 && h != c {
				s.attached[h] = append(s.attached[h], c)
			}
		}
	}
	for _, h := range hs {
		s.nodes[h].SetPeers(s.view(h))
	}
	for h := range old {
		if _, still := s.attached[h]; !still && s.nodes[h] != nil {
			s.nodes[h].SetPeers(s.view(h))
		}
	}
}

// attachRound runs one AttachSelector round, the clients in a fresh seeded
// order (live clients renew on their own timers, so who gets a full
// holder's last place is a matter of timing).
func (s *repelSim) attachRound(hs []int) {
	order := s.order.Perm(len(s.o.IDs))
	s.att.round(hs, s.net.Now(), order)
}

// AssignPredicted sends every peer to the superpeer nearest in predicted
// RTT (coordinates), superpeers to themselves: how a client of the token
// method picks among the live tokens. O(n·S).
func AssignPredicted(coords []vivaldi.Coord, sps []int) metrics.Assignment {
	a := make(metrics.Assignment, len(coords))
	is := make(map[int]bool, len(sps))
	for _, sp := range sps {
		is[sp] = true
	}
	for c := range coords {
		if is[c] {
			a[c] = c
			continue
		}
		best, bd := metrics.Unassigned, 0.0
		for _, sp := range sps {
			if d := coords[c].DistanceTo(coords[sp]); best < 0 || d < bd {
				best, bd = sp, d
			}
		}
		a[c] = best
	}
	return a
}

// closestKeys returns the indices of the m keys XOR-closest to target,
// closest first. O(n·m).
func closestKeys(keys []repel.Key, target repel.Key, m int) []int {
	var best []int
	dist := func(i int) repel.Key {
		var d repel.Key
		for b := range d {
			d[b] = keys[i][b] ^ target[b]
		}
		return d
	}
	var bd []repel.Key
	for i := range keys {
		d := dist(i)
		if len(best) == m && bytes.Compare(d[:], bd[m-1][:]) >= 0 {
			continue
		}
		pos := len(best)
		for pos > 0 && bytes.Compare(d[:], bd[pos-1][:]) < 0 {
			pos--
		}
		best = append(best[:pos], append([]int{i}, best[pos:]...)...)
		bd = append(bd[:pos], append([]repel.Key{d}, bd[pos:]...)...)
		if len(best) > m {
			best, bd = best[:m], bd[:m]
		}
	}
	return best
}
