package repel

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Surveys (Config.SurveyInterval): a settled holder checks its place by
// measurement. The coordinates bring a token near its clients, but they are
// only a prediction: on the PlanetLab matrix a greedy k-median over the
// coordinates is considerably worse than over the true RTTs. So once settled, a
// holder asks a few candidates — the clients the coordinates rank best as
// the 1-median of its clients — to measure their RTTs to itself and to a
// sample of its clients, compares each candidate's sum with its own
// measurements of the same clients, and hands the token to a candidate
// that is better by SurveyGain. The moves are a local search over measured
// costs (the k-medoids' swap step, restricted to a cluster), and each
// lowers the cluster's summed RTT by SurveyGain, so they stop.

// maxSurveyClients bounds the peers one survey asks a candidate to measure
// (the holder, its sampled clients and, with SiteRTT, the other holders).
const maxSurveyClients = 256

// maxSurveyBackoff bounds how far the wait between surveys that keep the
// token in place doubles: SurveyInterval × 16.
const maxSurveyBackoff = 16

// errBadSurvey is a survey or report that makes no sense: no peers, too
// many, an empty or repeated peer, or an RTT that is not a number or over
// MaxSampleRTT.
var errBadSurvey = fmt.Errorf("repel: malformed survey")

// survey is a holder's survey in flight.
type survey struct {
	ids     []string  // the peers to measure: ids[0] is the holder
	own     []float64 // the holder's measured RTT to each, seconds
	clients int       // ids[1:1+clients] are clients; the rest other holders (SiteRTT)
	// region, for a region survey: ids[1+k] is another token's digest
	// point region[k] (clients 0).
	region   []Sample
	cands    []Peer
	reports  map[string][]float64
	deadline time.Time
}

// surveyJob is what this node measures for another holder's survey.
type surveyJob struct {
	holder   string
	tok      Token
	ids      []string
	index    map[string]int
	rtt      []float64 // seconds; negative: not yet; +Inf: failed
	asked    []time.Time
	deadline time.Time
}

// Surveyed reports whether this node holds a token that a survey has found
// in its best place (since the node took it).
func (n *Node) Surveyed() bool { return n.held != nil && n.held.surveyed }

// Measuring reports whether this node is measuring for another holder's
// survey (it wants Ticks until it reports).
func (n *Node) Measuring() bool { return n.job != nil }

// settle makes the held token settled and this node a superpeer.
func (n *Node) settle(now time.Time) {
	h := n.held
	h.settled = true
	h.lastCool = now
	if n.cfg.SurveyInterval > 0 {
		h.surveyWait = n.cfg.SurveyInterval
		h.nextSurvey = now.Add(n.jitter(h.surveyWait))
	}
	n.setRole(superpeer.Superpeer)
	n.event(EventSettled, h.tok)
}

func checkSurvey(m Message) error {
	switch m.Type {
	case MsgSurvey:
		if len(m.Survey) == 0 || len(m.Survey) > maxSurveyClients || len(m.RTTs) != 0 {
			return fmt.Errorf("%w: %d peers, %d RTTs", errBadSurvey, len(m.Survey), len(m.RTTs))
		}
		seen := make(map[string]bool, len(m.Survey))
		for _, id := range m.Survey {
			if id == "" || seen[id] {
				return fmt.Errorf("%w: empty or repeated peer", errBadSurvey)
			}
			seen[id] = true
		}
	case MsgSurveyReport:
		if len(m.RTTs) > maxSurveyClients || len(m.Survey) != 0 {
			return fmt.Errorf("%w: %d RTTs, %d peers", errBadSurvey, len(m.RTTs), len(m.Survey))
		}
		for _, r := range m.RTTs {
			if math.IsNaN(r) || math.IsInf(r, 0) || r > maxSampleRTT {
				return fmt.Errorf("%w: RTT %v", errBadSurvey, r)
			}
		}
	}
	return nil
}

// surveyTick starts a due survey, or ends the one in flight once every
// candidate reported or its time is up.
func (n *Node) surveyTick(now time.Time) {
	h := n.held
	if n.cfg.SurveyInterval <= 0 || !h.settled || h.pending != nil {
		return
	}
	if s := h.survey; s != nil {
		if len(s.reports) == len(s.cands) || !now.Before(s.deadline) {
			n.finishSurvey(now)
		}
		return
	}
	if !now.Before(h.nextSurvey) {
		n.startSurvey(now)
	}
}

// startSurvey sends a survey to the best candidates among the attached
// clients (with RegionSurveys, every other time a region survey), or keeps
// the place if there is nothing to survey.
func (n *Node) startSurvey(now time.Time) {
	h := n.held
	if !n.coordOK() {
		n.keepPlace(now, false)
		return
	}
	if h.regionNext {
		if !n.startRegionSurvey(now) {
			n.keepPlace(now, true)
		}
		return
	}
	dims := len(n.coord.Vec)
	seen := map[string]bool{n.id: true}
	var attached []Peer
	for _, p := range n.peers {
		if p.Attached && !seen[p.ID] && validCoord(p.Coord) && len(p.Coord.Vec) == dims {
			seen[p.ID] = true
			attached = append(attached, p)
		}
	}
	var ids []string
	var own []float64
	for _, p := range attached {
		if rtt, ok := n.MeasuredRTT(now, p.ID); ok {
			ids, own = append(ids, p.ID), append(own, rtt.Seconds())
		}
	}
	if k := n.cfg.SurveyClients; len(ids) > k {
		n.rng.Shuffle(len(ids), func(i, j int) {
			ids[i], ids[j] = ids[j], ids[i]
			own[i], own[j] = own[j], own[i]
		})
		ids, own = ids[:k], own[:k]
	}
	ids, own = append([]string{n.id}, ids...), append([]float64{0}, own...)
	clients := len(ids) - 1
	holders := n.holders(now)
	if n.cfg.SiteRTT > 0 {
		// The other holders too, nearest first by the coordinates, as
		// many as fit: a candidate at another holder's site (SiteRTT)
		// would make one of the two move away at once.
		var others []Token
		for i, e := range n.tokens {
			if e.known && e.tok.Holder != n.id && !seen[e.tok.Holder] && now.Sub(e.lastHeard) < n.cfg.DeadAfter && uint32(i) != h.tok.ID {
				seen[e.tok.Holder] = true
				others = append(others, e.tok)
			}
		}
		slices.SortFunc(others, func(a, b Token) int {
			return cmp.Compare(n.coord.DistanceTo(a.Coord), n.coord.DistanceTo(b.Coord))
		})
		for _, o := range others[:min(len(others), maxSurveyClients-len(ids))] {
			ids, own = append(ids, o.Holder), append(own, -1)
		}
	}
	// The candidates: attached clients by their predicted summed distance
	// to the others and to this node.
	type scored struct {
		p    Peer
		cost float64
	}
	// Clients whose coordinates disagree with this node's measurements
	// (Config.CoordCheck) are measured for, but neither ranked by their
	// coordinates nor candidates.
	var fitting []Peer
	misfit, _ := n.misfits(now)
	for _, p := range attached {
		if !misfit[p.ID] {
			fitting = append(fitting, p)
		}
	}
	var cs []scored
	for _, c := range fitting {
		if holders[c.ID] || !n.refused[c.ID].IsZero() {
			continue
		}
		cost := c.Coord.DistanceTo(n.coord)
		for _, j := range fitting {
			if j.ID != c.ID {
				cost += c.Coord.DistanceTo(j.Coord)
			}
		}
		cs = append(cs, scored{c, cost})
	}
	if len(ids) < 2 || len(cs) == 0 {
		n.keepPlace(now, false)
		return
	}
	slices.SortFunc(cs, func(a, b scored) int {
		if c := cmp.Compare(a.cost, b.cost); c != 0 {
			return c
		}
		return cmp.Compare(a.p.ID, b.p.ID)
	})
	cs = cs[:min(len(cs), n.cfg.SurveyCandidates)]
	s := &survey{ids: ids, own: own, clients: clients, reports: make(map[string][]float64, len(cs)),
		deadline: now.Add(n.cfg.SurveyTimeout + n.cfg.MoveTimeout)}
	for _, c := range cs {
		s.cands = append(s.cands, c.p)
	}
	n.sendSurvey(s)
}

// sendSurvey puts survey s in flight: the held token's version, without
// its digest, goes to every candidate with the peers to measure.
func (n *Node) sendSurvey(s *survey) {
	h := n.held
	h.survey = s
	tok := h.tok
	tok.Digest, tok.Coord = nil, copyCoord(tok.Coord)
	n.event(EventSurvey, tok)
	for _, c := range s.cands {
		n.send(Message{Type: MsgSurvey, To: c.ID, Token: tok, Survey: s.ids})
	}
}

// finishSurvey weighs the reports: each candidate's summed RTT against the
// holder's over the peers both measured (at least nine in ten of the
// survey), and offers the token to the best if it gains SurveyGain and its
// mean RTT SurveyFloor.
func (n *Node) finishSurvey(now time.Time) {
	h := n.held
	s := h.survey
	h.survey = nil
	if s.region != nil {
		n.finishRegionSurvey(now, s)
		return
	}
	best, bestGain, bestDrop := -1, 0.0, 0.0
	var pos map[string]int // each surveyed peer's place in a report, for plausibleReport
	if n.cfg.SurveyCheck > 0 {
		pos = make(map[string]int, len(s.ids))
		for k, id := range s.ids {
			pos[id] = k
		}
	}
	for i, c := range s.cands {
		rep := s.reports[c.ID]
		if len(rep) != len(s.ids) {
			continue // declined, or not in time
		}
		if n.atAnotherSite(s, rep) {
			continue
		}
		if !n.plausibleReport(now, s, pos, c.ID, rep) {
			n.refused[c.ID] = now.Add(maxSurveyBackoff * n.cfg.SurveyInterval)
			tok := h.tok
			tok.Holder, tok.HolderKey = c.ID, c.Key
			n.event(EventSurveyRefused, tok)
			continue
		}
		var mine, theirs float64
		both := 0
		for k, id := range s.ids[:1+s.clients] {
			a, b := s.own[k], rep[k]
			if id == c.ID {
				b = 0
			}
			if a < 0 || b < 0 {
				continue
			}
			mine, theirs, both = mine+a, theirs+b, both+1
		}
		if 10*both < 9*(1+s.clients) || mine <= 0 {
			continue
		}
		if g := (mine - theirs) / mine; g > bestGain {
			best, bestGain, bestDrop = i, g, (mine-theirs)/float64(both)
		}
	}
	if best >= 0 && bestGain >= n.surveyGain(h) && bestDrop >= n.cfg.SurveyFloor.Seconds() {
		// If the move fails, survey again after a while.
		h.nextSurvey = now.Add(n.jitter(n.cfg.SurveyInterval))
		n.offer(now, s.cands[best], EventSurveyMoved)
		return
	}
	n.keepPlace(now, false)
}

// surveyGain is the relative gain a survey needs to move the held token:
// SurveyGain, and for a token that a survey moved here, doubled for every
// CoolingMoves moves on its count as minGain doubles a move's. A survey
// weighs its holder's clients as they are, and a move changes them (the
// clients of the old place re-attach, the new holder's neighbours join),
// so a chain of survey moves is a local search on an objective that moves
// with it, and live swarms showed a token passed on survey after survey
// long after the rest had settled (experiments/README.md, "Survey moves
// that cool"). Cooling bounds the chain; a token that came by the
// coordinates' moves still takes its first survey move at SurveyGain.
func (n *Node) surveyGain(h *held) float64 {
	if !h.tok.Surveyed {
		return n.cfg.SurveyGain
	}
	return n.cfg.SurveyGain * n.cooling(h)
}

// plausibleReport checks candidate c's report (pos: each surveyed peer's
// place in it) against what the holder
// knows of the same RTTs from elsewhere (Config.SurveyCheck). RTTs are
// symmetric, so c's RTT to the holder is the holder's own measurement of
// c, a, and its RTT to another candidate that reported is that
// candidate's RTT to c; and by the triangle inequality c's RTT to a
// client k is at least the holder's RTT to k less a. A report falls short
// when its RTT to the holder is below a; when its RTTs to the other
// candidates are below theirs to it for two of them at least and most;
// or when its sum over the clients both measured is below the sum of
// those lower bounds — each by more than SurveyCheck and SurveyFloor a
// peer. Real RTTs break the triangle inequality now and then, so the
// clients are weighed by their sum; and no candidate is refused on one
// other's word. A report that falls short claims less than the network
// allows: a candidate that shrinks its RTTs to win the token.
func (n *Node) plausibleReport(now time.Time, s *survey, pos map[string]int, c string, rep []float64) bool {
	if n.cfg.SurveyCheck <= 0 {
		return true
	}
	keep, floor := 1-n.cfg.SurveyCheck, n.cfg.SurveyFloor.Seconds()
	short := func(claim, known float64) bool { return claim >= 0 && known >= 0 && claim < keep*known-floor }
	kc, listed := pos[c]
	if listed {
		checked, against := 0, 0
		for _, o := range s.cands {
			orep, ko := s.reports[o.ID], pos[o.ID]
			if o.ID == c || len(orep) != len(s.ids) || ko == 0 || rep[ko] < 0 || orep[kc] < 0 {
				continue // not listed (0 is the holder), not reported, not measured
			}
			checked++
			if short(rep[ko], orep[kc]) {
				against++
			}
		}
		if against >= 2 && 2*against > checked {
			return false
		}
	}
	a := -1.0
	if listed && kc <= s.clients {
		a = s.own[kc]
	}
	if a < 0 {
		rtt, ok := n.MeasuredRTT(now, c)
		if !ok {
			return true
		}
		a = rtt.Seconds()
	}
	if short(rep[0], a) {
		return false
	}
	var claimed, bound float64
	m := 0
	for k := 1; k <= s.clients; k++ {
		if k == kc || s.own[k] < 0 || rep[k] < 0 {
			continue
		}
		claimed, bound, m = claimed+rep[k], bound+max(0, s.own[k]-a), m+1
	}
	return claimed >= keep*bound-floor*float64(m)
}

// atAnotherSite reports whether a candidate's report measures another
// holder within SiteRTT.
func (n *Node) atAnotherSite(s *survey, rep []float64) bool {
	for _, r := range rep[1+s.clients:] {
		if r >= 0 && r < n.cfg.SiteRTT.Seconds() {
			return true
		}
	}
	return false
}

// keepPlace ends a survey (a region survey if region) that found no better
// place: the token stays. With RegionSurveys a survey of the clients is
// followed by a region survey after the same wait, and the wait doubles
// after the region survey; without, after every survey. The place counts
// as surveyed once both kinds (or the one) kept it.
func (n *Node) keepPlace(now time.Time, region bool) {
	h := n.held
	if region {
		h.regionKept = true
	} else {
		h.clusterKept = true
	}
	h.surveyed = h.clusterKept && (h.regionKept || !n.cfg.RegionSurveys)
	n.event(EventSurveyKept, h.tok)
	h.regionNext = n.cfg.RegionSurveys && !region
	if !h.regionNext {
		h.surveyWait = min(2*h.surveyWait, maxSurveyBackoff*n.cfg.SurveyInterval)
	}
	h.nextSurvey = now.Add(n.jitter(h.surveyWait))
}

// onSurvey takes on a holder's survey: this node measures the listed
// peers (Ready.Probes, reusing its standing measurements) and reports.
// One frame must not buy anyone MaxSurveyClients measurements at will, so
// it declines (an empty report) a survey from a peer it does not know as
// the live holder of the token, one that comes while it measures for a
// survey already, one from a holder whose last survey it took less than
// SurveyInterval/4 ago (an honest holder waits at least SurveyInterval/2),
// and every survey if its own SurveyInterval is 0.
func (n *Node) onSurvey(now time.Time, m Message) {
	e := n.tokens[m.Token.ID]
	known := e.known && e.tok.Holder == m.From && now.Sub(e.lastHeard) < n.cfg.DeadAfter
	last, took := n.surveyedFor[m.From]
	soon := took && now.Sub(last) < n.cfg.SurveyInterval/4
	if !known || soon || n.job != nil || n.cfg.SurveyInterval <= 0 {
		n.send(Message{Type: MsgSurveyReport, To: m.From, Token: m.Token})
		return
	}
	for h, at := range n.surveyedFor {
		if now.Sub(at) >= n.cfg.SurveyInterval/4 {
			delete(n.surveyedFor, h)
		}
	}
	n.surveyedFor[m.From] = now
	tok := m.Token
	tok.Digest, tok.Coord = nil, copyCoord(tok.Coord)
	j := &surveyJob{
		holder: m.From, tok: tok, ids: append([]string(nil), m.Survey...),
		index: make(map[string]int, len(m.Survey)), rtt: make([]float64, len(m.Survey)),
		asked: make([]time.Time, len(m.Survey)), deadline: now.Add(n.cfg.SurveyTimeout),
	}
	for k, id := range j.ids {
		j.index[id] = k
		j.rtt[k] = -1
		if id == n.id {
			j.rtt[k] = 0
		}
	}
	n.job = j
	n.runJob(now)
}

// runJob asks for the survey's measurements still missing (at most
// maxProbesPerTick a Tick with the node's own) and reports once it has
// them all or its time is up.
func (n *Node) runJob(now time.Time) {
	j := n.job
	if j == nil {
		return
	}
	done := true
	for k, id := range j.ids {
		if j.rtt[k] >= 0 {
			continue // measured, or failed (+Inf)
		}
		if rtt, ok := n.MeasuredRTT(now, id); ok {
			j.rtt[k] = rtt.Seconds()
			continue
		}
		done = false
		if len(n.ready.Probes) < maxProbesPerTick && (j.asked[k].IsZero() || now.Sub(j.asked[k]) >= n.cfg.MoveTimeout) {
			j.asked[k] = now
			n.ready.Probes = append(n.ready.Probes, id)
		}
	}
	if !done && now.Before(j.deadline) {
		return
	}
	out := make([]float64, len(j.rtt))
	for k, r := range j.rtt {
		if r < 0 || r > maxSampleRTT {
			r = -1
		}
		out[k] = r
	}
	n.send(Message{Type: MsgSurveyReport, To: j.holder, Token: j.tok, RTTs: out})
	n.job = nil
}

// measuredForJob records a measurement the survey job asked for; it
// reports whether the node's own table should not keep it (the node did
// not ask for it itself).
func (n *Node) measuredForJob(id string, rtt float64) (jobOnly bool) {
	j := n.job
	if j == nil {
		return false
	}
	k, ok := j.index[id]
	if !ok || j.rtt[k] >= 0 {
		return false
	}
	j.rtt[k] = rtt
	_, mine := n.probes[id]
	return !mine
}

// onSurveyReport files a candidate's report on the survey in flight and
// ends the survey once every candidate has reported.
func (n *Node) onSurveyReport(now time.Time, m Message) {
	h := n.held
	if h == nil || h.survey == nil || !h.tok.sameVersion(m.Token) {
		return
	}
	s := h.survey
	if _, dup := s.reports[m.From]; dup || !slices.ContainsFunc(s.cands, func(p Peer) bool { return p.ID == m.From }) {
		return
	}
	s.reports[m.From] = append([]float64(nil), m.RTTs...)
	if len(s.reports) == len(s.cands) && h.pending == nil {
		n.finishSurvey(now)
	}
}

// startRegionSurvey asks the worst-served points of the other tokens'
// digests (weight × the RTT their holder measured, or the predicted RTT to
// the nearest other holder if less) to measure their RTTs to all of those
// points, SurveyCandidates of them, as a survey of clients does; it
// reports false if no digest has a measured point.
func (n *Node) startRegionSurvey(now time.Time) bool {
	h := n.held
	holders := n.holders(now)
	others, _ := n.otherHolders(now)
	seen := map[string]bool{n.id: true}
	var pts []Sample
	for i, e := range n.tokens {
		if uint32(i) == h.tok.ID || !e.known || now.Sub(e.lastHeard) >= n.cfg.DeadAfter {
			continue
		}
		for _, sm := range e.tok.Digest {
			if sm.RTT <= 0 || sm.Weight <= 0 || seen[sm.ID] || holders[sm.ID] {
				continue
			}
			seen[sm.ID] = true
			// A digest is as old as its announcement: a token that has
			// come near the point since serves it better than its
			// holder measured.
			if validCoord(sm.Coord) && len(sm.Coord.Vec) == len(n.coord.Vec) {
				for _, o := range others {
					sm.RTT = min(sm.RTT, sm.Coord.DistanceTo(o))
				}
			}
			pts = append(pts, sm)
		}
	}
	if len(pts) == 0 {
		return false
	}
	slices.SortFunc(pts, func(a, b Sample) int {
		if c := cmp.Compare(b.Weight*b.RTT, a.Weight*a.RTT); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	pts = pts[:min(len(pts), maxSurveyClients-1)]
	ids := []string{n.id}
	own := []float64{0}
	for _, sm := range pts {
		ids, own = append(ids, sm.ID), append(own, -1)
	}
	s := &survey{ids: ids, own: own, region: pts, reports: map[string][]float64{},
		deadline: now.Add(n.cfg.SurveyTimeout + n.cfg.MoveTimeout)}
	for _, sm := range pts {
		if len(s.cands) == n.cfg.SurveyCandidates {
			break
		}
		if n.refused[sm.ID].IsZero() {
			s.cands = append(s.cands, Peer{ID: sm.ID, Key: sm.Key, Coord: sm.Coord})
		}
	}
	if len(s.cands) == 0 {
		return false
	}
	n.sendSurvey(s)
	return true
}

// otherHolders are the coordinates of the other live tokens' holders and
// the clients each serves as its digest counts them (the points' weights).
func (n *Node) otherHolders(now time.Time) (coords []vivaldi.Coord, loads []float64) {
	for i, e := range n.tokens {
		if uint32(i) != n.held.tok.ID && e.known && now.Sub(e.lastHeard) < n.cfg.DeadAfter && validCoord(e.tok.Coord) && len(e.tok.Coord.Vec) == len(n.coord.Vec) {
			var load float64
			for _, sm := range e.tok.Digest {
				load += sm.Weight
			}
			coords, loads = append(coords, e.tok.Coord), append(loads, load)
		}
	}
	return coords, loads
}

// finishRegionSurvey weighs a region survey: what each candidate would save
// the points' clients (Σ weight × max(0, their RTT now − the candidate's),
// the candidate's own point at 0), against what this node and its attached
// clients would lose without it (their predicted RTT to the nearest other
// holder less the RTT measured to this node, this node's own at 0). With a
// Capacity both sides respect it: the clients go to the nearest other
// holder with room (what its digest's weights leave of C; a client no
// holder has room for counts unservedCost), and a candidate saves for at
// most C clients, those that gain most. It offers the token to the
// candidate with the largest net saving if that is at least SurveyGain of
// the clients' summed RTT (both sides) and SurveyFloor a client.
func (n *Node) finishRegionSurvey(now time.Time, s *survey) {
	others, loads := n.otherHolders(now)
	if len(others) == 0 {
		n.keepPlace(now, true)
		return
	}
	room := make([]float64, len(others))
	for j := range room {
		room[j] = math.Inf(1)
		if n.cfg.Capacity > 0 {
			room[j] = max(0, float64(n.cfg.Capacity)-loads[j])
		}
	}
	type moved struct {
		here, regret float64
		dist         []float64
	}
	var mine []moved
	var base, weight float64
	add := func(c vivaldi.Coord, here float64) {
		dist := make([]float64, len(others))
		for j, o := range others {
			dist[j] = c.DistanceTo(o)
		}
		mine = append(mine, moved{here, regret(dist), dist})
		base, weight = base+here, weight+1
	}
	// This node is a client of the others once the token is gone, as the
	// candidate's own point is served at 0 once it has it.
	add(n.coord, 0)
	for _, p := range n.peers {
		if !p.Attached || !validCoord(p.Coord) || len(p.Coord.Vec) != len(n.coord.Vec) {
			continue
		}
		here := p.Coord.DistanceTo(n.coord)
		if rtt, ok := n.MeasuredRTT(now, p.ID); ok {
			here = rtt.Seconds()
		}
		add(p.Coord, here)
	}
	// The clients that lose most by a second choice take room first, as
	// the capacitated potential assigns them (field.capacitate).
	slices.SortStableFunc(mine, func(a, b moved) int { return cmp.Compare(b.regret, a.regret) })
	var loss float64
	for _, m := range mine {
		alt := unservedCost
		if j := nearestWith(m.dist, func(o int) bool { return room[o] >= 1 }); j >= 0 {
			alt, room[j] = m.dist[j], room[j]-1
		}
		loss += max(0, alt-m.here)
	}
	for _, sm := range s.region {
		base, weight = base+sm.Weight*sm.RTT, weight+sm.Weight
	}
	pos := make(map[string]int, len(s.ids))
	for k, id := range s.ids {
		pos[id] = k
	}
	best, bestNet := -1, 0.0
	for i, c := range s.cands {
		rep := s.reports[c.ID]
		if len(rep) != len(s.ids) {
			continue
		}
		if !n.plausibleReport(now, s, pos, c.ID, rep) {
			n.refused[c.ID] = now.Add(maxSurveyBackoff * n.cfg.SurveyInterval)
			tok := n.held.tok
			tok.Holder, tok.HolderKey = c.ID, c.Key
			n.event(EventSurveyRefused, tok)
			continue
		}
		if net := regionSaving(s, c.ID, rep, float64(n.cfg.Capacity)) - loss; net > bestNet {
			best, bestNet = i, net
		}
	}
	if best < 0 || base <= 0 || bestNet < n.cfg.SurveyGain*base || bestNet < n.cfg.SurveyFloor.Seconds()*weight {
		n.keepPlace(now, true)
		return
	}
	n.held.nextSurvey = now.Add(n.jitter(n.cfg.SurveyInterval))
	n.offer(now, s.cands[best], EventRegionMoved)
}

// regionSaving is what candidate c (its report rep of a region survey s)
// would save the region's points: Σ weight × max(0, RTT now − c's RTT), c's
// own point at 0; with a capacity C > 0, for the C clients that gain most
// (a point straddling the limit in part), as a holder serves at most C.
func regionSaving(s *survey, c string, rep []float64, capacity float64) float64 {
	var gs []saving
	for k, sm := range s.region {
		r := rep[1+k]
		if sm.ID == c {
			r = 0
		}
		if r >= 0 && sm.RTT > r {
			gs = append(gs, saving{w: sm.Weight, d: r, gain: sm.RTT - r})
		}
	}
	if capacity <= 0 {
		capacity = math.Inf(1)
	}
	var save float64
	fillByGain(gs, capacity, func(g saving, in float64) { save += in * g.gain })
	return save
}
