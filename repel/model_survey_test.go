package repel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func surveyConfig() Config {
	c := testConfig(1, Attract)
	c.SurveyInterval = 10 * time.Second
	c.SurveyTimeout = 5 * time.Second
	c.SurveyCandidates = 2
	c.ProbeTTL = time.Hour
	// The clients' survey alone; regionHolder turns region surveys on.
	c.RegionSurveys = false
	return c
}

func at2(x, y float64) vivaldi.Coord {
	return vivaldi.Coord{Vec: []float64{x, y}, Height: 0.0001}
}

// surveyClients are a's clients around (20, 0) ms: c1 sits in the middle,
// c2 next to it, so the coordinates rank them the best places.
var surveyClients = []Peer{
	{ID: "c1", Coord: at2(0.020, 0)},
	{ID: "c2", Coord: at2(0.0205, 0)},
	{ID: "c3", Coord: at2(0.015, 0)},
	{ID: "c4", Coord: at2(0.025, 0)},
	{ID: "c5", Coord: at2(0.020, 0.005)},
	{ID: "c6", Coord: at2(0.020, -0.005)},
}

// holdingAmidClients is "a", holding token 0 (epoch 1) at the middle of
// surveyClients by the coordinates, all of them attached to it.
func holdingAmidClients(t *testing.T, cfg Config) *Node {
	t.Helper()
	a := amidClients(t, cfg)
	holderOf(t, a, 0, 1)
	return a
}

// amidClients is "a" at the middle of surveyClients by the coordinates,
// all of them attached to it, holding nothing yet.
func amidClients(t *testing.T, cfg Config) *Node {
	t.Helper()
	a := mustNode(t, "a", cfg)
	a.SetCoord(at2(0.0201, 0.0001))
	var ps []Peer
	for _, p := range surveyClients {
		p.Key, p.Attached = PeerKey(p.ID), true
		ps = append(ps, p)
	}
	a.SetPeers(ps)
	return a
}

// surveyHolder is holdingAmidClients (so a makes no move of its own),
// settled at 5 s and having measured every client at rtt. It returns the
// survey it sends.
func surveyHolder(t *testing.T, cfg Config, rtt time.Duration) (*Node, []Message, float64) {
	t.Helper()
	return surveyHolderWith(t, cfg, func(string) time.Duration { return rtt })
}

// surveyHolderWith is surveyHolder with the RTT to each client rtt(id).
func surveyHolderWith(t *testing.T, cfg Config, rtt func(id string) time.Duration) (*Node, []Message, float64) {
	t.Helper()
	return surveyFrom(t, holdingAmidClients(t, cfg), rtt)
}

// surveyFrom ticks holder a, measuring every client at rtt(id), until it
// sends a survey, and returns the survey and when.
func surveyFrom(t *testing.T, a *Node, rtt func(id string) time.Duration) (*Node, []Message, float64) {
	t.Helper()
	var sent []Message
	for s := 0.25; s <= 30; s += 0.25 {
		r := a.Tick(at(s))
		if len(msgs(r, MsgMove)) > 0 {
			t.Fatalf("at %.2f s: a moved on the coordinates: %+v", s, msgs(r, MsgMove))
		}
		for _, id := range r.Probes {
			a.Measured(at(s), id, rtt(id), true)
		}
		if sent = msgs(r, MsgSurvey); len(sent) > 0 {
			if !hasEvent(r, EventSurvey) {
				t.Fatal("survey sent without its event")
			}
			return a, sent, s
		}
	}
	t.Fatal("no survey within 30 s of taking the token")
	return nil, nil, 0
}

func report(from string, tok Token, ids []string, rtt func(id string) float64) Message {
	out := make([]float64, len(ids))
	for i, id := range ids {
		out[i] = rtt(id)
	}
	return Message{Type: MsgSurveyReport, From: from, To: "a", Token: tok, RTTs: out}
}

// A settled holder surveys its best-placed clients by the coordinates; a
// candidate whose measured RTTs to the clients sum lower by SurveyGain gets
// the token, marked Surveyed, and takes it settled.
func TestNode_SurveyMovesToMeasuredBetterPlace(t *testing.T) {
	a, sent, ts := surveyHolder(t, surveyConfig(), 30*time.Millisecond)
	if ts < 5+5 || ts > 5+15+0.25 {
		t.Fatalf("survey at %.2f s, want SurveyInterval (jittered ½–1½×) after settling at 5 s", ts)
	}
	var to []string
	for _, m := range sent {
		to = append(to, m.To)
	}
	slices.Sort(to)
	if !slices.Equal(to, []string{"c1", "c2"}) {
		t.Fatalf("surveyed %v, want the coordinates' two best places c1, c2", to)
	}
	ids := sent[0].Survey
	if ids[0] != "a" || len(ids) != 7 || !slices.Equal(ids, sent[1].Survey) {
		t.Fatalf("survey lists %v, want a then its 6 clients, the same for every candidate", ids)
	}
	tok, _ := a.Held()
	// c2 measures 40 ms to everyone: worse. c1 measures 10 ms to the
	// clients, and a's 30 ms to a: better.
	r, err := a.Step(at(ts+1), report("c2", sent[0].Token, ids, func(string) float64 { return 0.040 }))
	if err != nil || len(r.Messages) != 0 {
		t.Fatalf("first report: %v %+v", err, r)
	}
	r, err = a.Step(at(ts+2), report("c1", sent[0].Token, ids, func(id string) float64 {
		switch id {
		case "c1":
			return 0
		case "a":
			return 0.030
		}
		return 0.010
	}))
	if err != nil {
		t.Fatal(err)
	}
	mv := msgs(r, MsgMove)
	if len(mv) != 1 || mv[0].To != "c1" || !mv[0].Token.Surveyed || mv[0].Token.Epoch <= tok.Epoch || !hasEvent(r, EventSurveyMoved) {
		t.Fatalf("want a surveyed offer to c1, got %+v", r)
	}
	// c1 takes it settled: a superpeer at once.
	c1 := mustNode(t, "c1", surveyConfig())
	c1.SetCoord(at2(0.020, 0))
	c1.Tick(at(ts + 2))
	r, err = c1.Step(at(ts+2.1), Message{Type: MsgMove, From: "a", To: "c1", Token: mv[0].Token})
	if err != nil || r.Role != superpeer.Superpeer || !hasEvent(r, EventSettled) || len(msgs(r, MsgMoveAck)) != 1 {
		t.Fatalf("c1 on a surveyed offer: %v role %v %+v", err, r.Role, r)
	}
	// An offer that is not surveyed waits for SettleAfter as ever.
	c2 := mustNode(t, "c2", surveyConfig())
	c2.Tick(at(0))
	plain := mv[0].Token
	plain.Surveyed, plain.Holder, plain.HolderKey = false, "c2", PeerKey("c2")
	if r, err = c2.Step(at(1), Message{Type: MsgMove, From: "a", To: "c2", Token: plain}); err != nil || r.Role != superpeer.Client || !holds(c2) {
		t.Fatalf("plain offer: %v role %v", err, r.Role)
	}
}

// A chain of survey moves cools as the coordinates' moves do: a token that
// a survey brought needs SurveyGain doubled for every CoolingMoves moves on
// its count, and one that came by the coordinates takes its first survey
// move at SurveyGain, whatever its count.
func TestNode_SurveyMovesCool(t *testing.T) {
	cfg := surveyConfig() // SurveyGain 2%, CoolingMoves 4
	for _, c := range []struct {
		surveyed bool
		moves    uint32
		move     bool
	}{
		{true, 8, false},  // 8% needed
		{true, 2, true},   // 2.8%
		{false, 8, true},  // 2%
		{true, 0, true},   // 2%
		{true, 12, false}, // 16%
	} {
		t.Run(fmt.Sprintf("surveyed=%v,moves=%d", c.surveyed, c.moves), func(t *testing.T) {
			a := amidClients(t, cfg)
			a.Tick(at(0))
			tok := Token{ID: 0, Epoch: 1, Holder: "a", HolderKey: PeerKey("a"), Moves: c.moves, Surveyed: c.surveyed}
			if _, err := a.Step(at(0), Message{Type: MsgMove, From: "x", To: "a", Token: tok}); err != nil {
				t.Fatal(err)
			}
			a, sent, ts := surveyFrom(t, a, func(string) time.Duration { return 30 * time.Millisecond })
			// c1 is 6% better: 30 ms to a, 0 to itself, 27.84 ms to
			// the other five, against a's 30 ms to each of six.
			var r Ready
			for _, m := range sent {
				f := func(string) float64 { return 0.040 }
				if m.To == "c1" {
					f = func(id string) float64 {
						switch id {
						case "c1":
							return 0
						case "a":
							return 0.030
						}
						return 0.02784
					}
				}
				var err error
				if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, f)); err != nil {
					t.Fatal(err)
				}
			}
			moved := len(msgs(r, MsgMove)) == 1 && hasEvent(r, EventSurveyMoved)
			if moved != c.move || (!moved && !hasEvent(r, EventSurveyKept)) {
				t.Fatalf("moved %v, want %v: %+v", moved, c.move, r)
			}
		})
	}
}

// The survey lists the other live holders after the clients; a candidate
// that measures one of them within SiteRTT is passed over (the two tokens
// would share a site), and the next best candidate gets the token.
func TestNode_SurveyAvoidsAnotherHoldersSite(t *testing.T) {
	cfg := surveyConfig()
	cfg.Tokens = 2
	a := holdingAmidClients(t, cfg)
	b := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: at2(0.3, 0)}
	var sent []Message
	var ts float64
	for s := 0.25; s <= 30 && len(sent) == 0; s += 0.25 {
		if _, err := a.Step(at(s), Message{Type: MsgAnnounce, From: "b", Token: b}); err != nil {
			t.Fatal(err)
		}
		r := a.Tick(at(s))
		for _, id := range r.Probes {
			a.Measured(at(s), id, 30*time.Millisecond, true)
		}
		sent, ts = msgs(r, MsgSurvey), s
	}
	if len(sent) != 2 {
		t.Fatalf("surveys %+v", sent)
	}
	ids := sent[0].Survey
	if len(ids) != 8 || ids[7] != "b" {
		t.Fatalf("survey lists %v, want a, its 6 clients, then the other holder b", ids)
	}
	rtt := func(best float64, toB float64) func(string) float64 {
		return func(id string) float64 {
			switch id {
			case "b":
				return toB
			case "a":
				return 0.030 // as a measured them
			}
			return best
		}
	}
	// c1 measures 10 ms to the clients but sits 1 ms from b; c2 measures
	// 20 ms, 80 ms from b.
	var r Ready
	for _, m := range sent {
		f := rtt(0.020, 0.080)
		if m.To == "c1" {
			f = rtt(0.010, 0.001)
		}
		var err error
		if r, err = a.Step(at(ts+1), report(m.To, m.Token, ids, f)); err != nil {
			t.Fatal(err)
		}
	}
	if mv := msgs(r, MsgMove); len(mv) != 1 || mv[0].To != "c2" {
		t.Fatalf("want the token offered to c2 (c1 shares b's site), got %+v", r)
	}
}

// No candidate better by SurveyGain and SurveyFloor, or none with nine in
// ten of the survey measured: the token stays, the holder counts as
// surveyed, and the next survey waits twice as long.
func TestNode_SurveyKeepsPlace(t *testing.T) {
	for name, c := range map[string]struct {
		own time.Duration
		rtt func(id string) float64
	}{
		"hardly-better": {30 * time.Millisecond, func(string) float64 { return 0.0299 }},
		"too-few": {30 * time.Millisecond, func(id string) float64 {
			if id == "c3" || id == "c4" {
				return -1
			}
			return 0.010
		}},
		// A third better, but by 0.1 ms: LAN noise, under SurveyFloor.
		"lan": {300 * time.Microsecond, func(string) float64 { return 0.0002 }},
	} {
		rtt := c.rtt
		t.Run(name, func(t *testing.T) {
			a, sent, ts := surveyHolder(t, surveyConfig(), c.own)
			if a.Surveyed() {
				t.Fatal("surveyed before any survey ended")
			}
			var r Ready
			for _, m := range sent {
				var err error
				if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, rtt)); err != nil {
					t.Fatal(err)
				}
			}
			if !hasEvent(r, EventSurveyKept) || len(msgs(r, MsgMove)) != 0 || !a.Surveyed() {
				t.Fatalf("want the place kept, got %+v", r)
			}
			// The next survey: not before ½ × 2 × SurveyInterval.
			for s := ts + 1.25; s < ts+1+10; s += 0.25 {
				if r := a.Tick(at(s)); len(msgs(r, MsgSurvey)) != 0 {
					t.Fatalf("surveyed again %.2f s after keeping the place", s-ts-1)
				}
			}
		})
	}
}

// A candidate that does not report in time does not hold the survey up.
func TestNode_SurveyTimesOut(t *testing.T) {
	cfg := surveyConfig()
	a, _, ts := surveyHolder(t, cfg, 30*time.Millisecond)
	end := ts + (cfg.SurveyTimeout + cfg.MoveTimeout).Seconds()
	if r := a.Tick(at(end - 0.01)); hasEvent(r, EventSurveyKept) {
		t.Fatal("survey ended before its deadline")
	}
	if r := a.Tick(at(end)); !hasEvent(r, EventSurveyKept) {
		t.Fatalf("survey not ended at its deadline: %+v", r)
	}
}

// A candidate measures every peer of the survey (itself 0, standing
// measurements reused), reports in the survey's order, marks what it could
// not measure by its deadline, and declines a survey from a peer it does
// not know to hold the token, and another holder's survey meanwhile.
func TestNode_SurveyCandidateMeasuresAndReports(t *testing.T) {
	cfg := surveyConfig()
	cfg.Tokens = 2
	c := mustNode(t, "c1", cfg)
	c.Tick(at(0))
	c.Measured(at(0.5), "c3", 7*time.Millisecond, true) // a standing measurement
	tok := Token{ID: 0, Epoch: 3, Holder: "a", HolderKey: PeerKey("a"), Coord: at2(0, 0)}
	ids := []string{"a", "c1", "c2", "c3", "c4"}
	// Not known as the token's holder yet: declined, nothing measured.
	r, err := c.Step(at(0.6), Message{Type: MsgSurvey, From: "a", To: "c1", Token: tok, Survey: ids})
	if rep := msgs(r, MsgSurveyReport); err != nil || len(rep) != 1 || len(rep[0].RTTs) != 0 || len(r.Probes) != 0 || c.Measuring() {
		t.Fatalf("survey from a peer not known to hold the token: %v %+v", err, r)
	}
	if _, err := c.Step(at(0.7), Message{Type: MsgAnnounce, From: "a", Token: tok}); err != nil {
		t.Fatal(err)
	}
	r, err = c.Step(at(1), Message{Type: MsgSurvey, From: "a", To: "c1", Token: tok, Survey: ids})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(r.Probes)
	if !slices.Equal(r.Probes, []string{"a", "c2", "c4"}) || !c.Measuring() {
		t.Fatalf("probes %v, want a, c2, c4 (not itself, not c3 measured already)", r.Probes)
	}
	// Another holder's survey meanwhile: declined at once.
	other := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: at2(0, 0)}
	if _, err := c.Step(at(1.05), Message{Type: MsgAnnounce, From: "b", Token: other}); err != nil {
		t.Fatal(err)
	}
	r, err = c.Step(at(1.1), Message{Type: MsgSurvey, From: "b", To: "c1", Token: other, Survey: []string{"b", "c9"}})
	if rep := msgs(r, MsgSurveyReport); err != nil || len(rep) != 1 || rep[0].To != "b" || len(rep[0].RTTs) != 0 || len(r.Probes) != 0 {
		t.Fatalf("want an empty report to b, got %v %+v", err, r)
	}
	c.Measured(at(1.2), "a", 12*time.Millisecond, true)
	c.Measured(at(1.3), "c2", 0, false) // failed
	if r = c.Tick(at(2)); len(msgs(r, MsgSurveyReport)) != 0 {
		t.Fatalf("reported with c4 still unmeasured: %+v", r)
	}
	r = c.Tick(at(1 + cfg.SurveyTimeout.Seconds()))
	rep := msgs(r, MsgSurveyReport)
	if len(rep) != 1 || rep[0].To != "a" || !rep[0].Token.sameVersion(tok) || c.Measuring() {
		t.Fatalf("want the report to a at the deadline, got %+v", r)
	}
	want := []float64{0.012, 0, -1, 0.007, -1}
	for i := range want {
		if math.Abs(rep[0].RTTs[i]-want[i]) > 1e-9 {
			t.Fatalf("report %v, want %v", rep[0].RTTs, want)
		}
	}
	// What it measured only for the survey is not kept as its own.
	if _, ok := c.MeasuredRTT(at(7), "a"); ok {
		t.Fatal("the survey's measurement of a stayed in the candidate's own table")
	}
}

// A candidate takes at most one survey from a holder per SurveyInterval/4
// (an honest holder waits at least SurveyInterval/2), and none at all with
// surveys off.
func TestNode_SurveyRateLimited(t *testing.T) {
	tok := Token{ID: 0, Epoch: 3, Holder: "a", HolderKey: PeerKey("a"), Coord: at2(0, 0)}
	ask := func(c *Node, s float64) Message {
		t.Helper()
		r, err := c.Step(at(s), Message{Type: MsgSurvey, From: "a", To: "c1", Token: tok, Survey: []string{"a", "c1"}})
		rep := msgs(r, MsgSurveyReport)
		if err != nil || len(rep) != 1 {
			t.Fatalf("at %.1f s: %v %+v, want a report at once (a measured already)", s, err, r)
		}
		return rep[0]
	}
	for _, on := range []bool{true, false} {
		cfg := surveyConfig() // SurveyInterval 10 s
		if !on {
			cfg.SurveyInterval = 0
		}
		c := mustNode(t, "c1", cfg)
		c.Tick(at(0))
		if _, err := c.Step(at(0.5), Message{Type: MsgAnnounce, From: "a", Token: tok}); err != nil {
			t.Fatal(err)
		}
		c.Measured(at(0.5), "a", 9*time.Millisecond, true)
		if !on {
			if rep := ask(c, 1); len(rep.RTTs) != 0 {
				t.Fatalf("surveys off: measured %v", rep.RTTs)
			}
			continue
		}
		if rep := ask(c, 1); len(rep.RTTs) != 2 || rep.RTTs[0] != 0.009 || rep.RTTs[1] != 0 {
			t.Fatalf("first survey: %v", rep.RTTs)
		}
		if rep := ask(c, 3.4); len(rep.RTTs) != 0 {
			t.Fatalf("a second survey 2.4 s later was measured: %v", rep.RTTs)
		}
		if rep := ask(c, 3.6); len(rep.RTTs) != 2 {
			t.Fatalf("a survey 2.6 s after the first was declined")
		}
	}
}

func TestNode_SurveyRefusesNonsense(t *testing.T) {
	n := mustNode(t, "a", surveyConfig())
	n.Tick(at(0))
	tok := Token{ID: 0, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: at2(0, 0)}
	many := make([]string, maxSurveyClients+1)
	for i := range many {
		many[i] = string(rune('A' + i))
	}
	for name, c := range map[string]struct {
		m    Message
		want error
	}{
		"empty":      {Message{Type: MsgSurvey, From: "b", To: "a", Token: tok}, errBadSurvey},
		"too-many":   {Message{Type: MsgSurvey, From: "b", To: "a", Token: tok, Survey: many}, errBadSurvey},
		"repeated":   {Message{Type: MsgSurvey, From: "b", To: "a", Token: tok, Survey: []string{"b", "x", "x"}}, errBadSurvey},
		"blank":      {Message{Type: MsgSurvey, From: "b", To: "a", Token: tok, Survey: []string{"b", ""}}, errBadSurvey},
		"not-holder": {Message{Type: MsgSurvey, From: "c", To: "a", Token: tok, Survey: []string{"b"}}, errNotHolder},
		"not-me":     {Message{Type: MsgSurvey, From: "b", To: "z", Token: tok, Survey: []string{"b"}}, errNotForMe},
		"nan":        {Message{Type: MsgSurveyReport, From: "b", To: "a", Token: tok, RTTs: []float64{math.NaN()}}, errBadSurvey},
		"inf":        {Message{Type: MsgSurveyReport, From: "b", To: "a", Token: tok, RTTs: []float64{math.Inf(1)}}, errBadSurvey},
		"over":       {Message{Type: MsgSurveyReport, From: "b", To: "a", Token: tok, RTTs: []float64{maxSampleRTT + 1}}, errBadSurvey},
	} {
		r, err := n.Step(at(1), c.m)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
		if len(r.Messages) != 0 || len(r.Probes) != 0 || n.Measuring() {
			t.Errorf("%s: refused message produced output %+v", name, r)
		}
	}
	// A report nobody asked for changes nothing.
	r, err := n.Step(at(2), Message{Type: MsgSurveyReport, From: "b", To: "a", Token: tok, RTTs: []float64{0.01}})
	if err != nil || len(r.Messages) != 0 || len(r.Events) != 0 {
		t.Fatalf("stray report: %v %+v", err, r)
	}
}

// holds reports whether the node holds a token.
func holds(n *Node) bool { _, ok := n.Held(); return ok }

// A candidate that claims less than the holder's own measurements allow
// is refused (EventSurveyRefused, naming it), counted, and not surveyed
// again soon; an honest report that gains as much is taken. a measures c1
// at 2 ms and its other clients at 30 ms, so c1's RTT to each is at least
// 28 ms (the triangle inequality) and to a 2 ms (a's own measurement).
func TestNode_SurveyRefusesImplausibleReports(t *testing.T) {
	own := func(id string) time.Duration {
		if id == "c1" {
			return 2 * time.Millisecond
		}
		return 30 * time.Millisecond
	}
	claims := func(toA, toClients float64) func(string) float64 {
		return func(id string) float64 {
			switch id {
			case "a":
				return toA
			case "c1":
				return 0
			}
			return toClients
		}
	}
	for name, tc := range map[string]struct {
		c1      func(string) float64
		check   float64
		refused bool
	}{
		// 28 ms to every client, as near as the triangle inequality
		// allows: the sum drops by 6.6%.
		"honest":                        {claims(0.002, 0.028), 0.1, false},
		"shrinks its RTT to the holder": {claims(0.0005, 0.029), 0.1, true},
		"shrinks its RTTs to clients":   {claims(0.002, 0.015), 0.1, true},
		"shrinks them, unchecked":       {claims(0.002, 0.015), 0, false},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := surveyConfig()
			cfg.SurveyCheck = tc.check
			a, sent, ts := surveyHolderWith(t, cfg, own)
			var r Ready
			for _, m := range sent {
				rtt := func(string) float64 { return 0.040 }
				if m.To == "c1" {
					rtt = tc.c1
				}
				var err error
				if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, rtt)); err != nil {
					t.Fatal(err)
				}
			}
			mv := msgs(r, MsgMove)
			refused := 0
			for _, e := range r.Events {
				if e.Kind == EventSurveyRefused {
					refused++
					if e.Token.Holder != "c1" {
						t.Errorf("refused %s's report, want c1's", e.Token.Holder)
					}
				}
			}
			if tc.refused {
				if refused != 1 || len(mv) != 0 || !hasEvent(r, EventSurveyKept) {
					t.Fatalf("want c1's report refused and the place kept, got %+v", r)
				}
				if until := a.refused["c1"]; !until.After(at(ts + 1 + 15*cfg.SurveyInterval.Seconds())) {
					t.Fatalf("c1 skipped until %v, want 16 survey intervals", until)
				}
				return
			}
			if refused != 0 || len(mv) != 1 || mv[0].To != "c1" || !hasEvent(r, EventSurveyMoved) {
				t.Fatalf("want the token offered to c1, got %+v", r)
			}
		})
	}
}

// With three candidates or more, each one's RTTs to the others are
// checked against theirs to it: a candidate that claims 5 ms to every
// peer but a (30 ms, as a measured it) is refused on the word of the two
// others, who measured 30 ms to it.
func TestNode_SurveyChecksCandidatesAgainstEachOther(t *testing.T) {
	for _, check := range []float64{0.1, 0} {
		cfg := surveyConfig()
		cfg.SurveyCandidates, cfg.SurveyCheck = 3, check
		a, sent, ts := surveyHolder(t, cfg, 30*time.Millisecond)
		if len(sent) != 3 {
			t.Fatalf("%d candidates surveyed, want 3", len(sent))
		}
		var r Ready
		for _, m := range sent {
			rtt := func(id string) float64 {
				if id == m.To {
					return 0
				}
				return 0.030
			}
			if m.To == "c1" {
				rtt = func(id string) float64 {
					switch id {
					case "a":
						return 0.030
					case "c1":
						return 0
					}
					return 0.005
				}
			}
			var err error
			if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, rtt)); err != nil {
				t.Fatal(err)
			}
		}
		moved := len(msgs(r, MsgMove)) == 1
		if check > 0 && (moved || !hasEvent(r, EventSurveyRefused)) {
			t.Fatalf("SurveyCheck %v: want c1 refused, got %+v", check, r)
		}
		if check == 0 && (!moved || hasEvent(r, EventSurveyRefused)) {
			t.Fatalf("SurveyCheck 0: want c1's claim taken, got %+v", r)
		}
	}
}

// regionHolder is surveyHolder with RegionSurveys and only surveys moving
// a settled token, its first survey (of its clients) answered worse by
// every candidate, and then the announcement of token 1, held by b at bAt,
// whose digest has four points r1…r4 — b measured them 150 ms away (weight
// w each) — scattered around b in the coordinates (141 ms from it), as a
// misplaced region is, and one point next to b. It returns a and the region survey a sends next.
func regionHolder(t *testing.T, bAt vivaldi.Coord, w float64) (*Node, []Message, float64) {
	t.Helper()
	cfg := surveyConfig()
	cfg.Tokens = 2
	cfg.DeadAfter = time.Minute
	cfg.SettledMinGain = 1000 // a settled token moves on surveys only
	cfg.RegionSurveys = true
	a, sent, ts := surveyHolder(t, cfg, 30*time.Millisecond)
	for _, m := range sent {
		if _, err := a.Step(at(ts+1), report(m.To, m.Token, m.Survey, func(string) float64 { return 0.040 })); err != nil {
			t.Fatal(err)
		}
	}
	if a.Surveyed() {
		t.Fatal("surveyed before a region survey")
	}
	pt := func(id string, c vivaldi.Coord, w, rtt float64) Sample {
		return Sample{ID: id, Key: PeerKey(id), Coord: c, Weight: w, RTT: rtt}
	}
	off := func(dx, dy float64) vivaldi.Coord { return at2(bAt.Vec[0]+dx, bAt.Vec[1]+dy) }
	b := Token{ID: 1, Epoch: 1, Holder: "b", HolderKey: PeerKey("b"), Coord: bAt, Digest: []Sample{
		pt("bn", vivaldi.Coord{Vec: slices.Clone(bAt.Vec), Height: 0.0001}, 10, 0.002),
		pt("r1", off(0.1, 0.1), w, 0.150), pt("r2", off(-0.1, 0.1), w, 0.150),
		pt("r3", off(0.1, -0.1), w, 0.150), pt("r4", off(-0.1, -0.1), w, 0.150),
	}}
	if _, err := a.Step(at(ts+1.5), Message{Type: MsgAnnounce, From: "b", Token: b}); err != nil {
		t.Fatal(err)
	}
	for s := ts + 1.75; s < ts+30; s += 0.25 {
		r := a.Tick(at(s))
		if len(msgs(r, MsgMove)) > 0 {
			t.Fatalf("at %.2f s: a moved without a survey", s)
		}
		for _, id := range r.Probes {
			a.Measured(at(s), id, 30*time.Millisecond, true)
		}
		if sv := msgs(r, MsgSurvey); len(sv) > 0 {
			return a, sv, s
		}
	}
	t.Fatal("no region survey")
	return nil, nil, 0
}

// A region survey asks the other tokens' worst-served digest points
// (weight × measured RTT) to measure all of them, and hands the token to
// one that would save them more than this holder's clients lose without
// it — where the coordinates, which scatter the region, saw no such place.
func TestNode_RegionSurveyMovesToARegionServedFromAfar(t *testing.T) {
	a, sent, ts := regionHolder(t, at2(0.022, 0), 3)
	var to []string
	for _, m := range sent {
		to = append(to, m.To)
	}
	slices.Sort(to)
	if !slices.Equal(to, []string{"r1", "r2"}) {
		t.Fatalf("region survey to %v, want the two worst-served points r1, r2", to)
	}
	ids := sent[0].Survey
	if want := []string{"a", "r1", "r2", "r3", "r4", "bn"}; !slices.Equal(ids, want) {
		t.Fatalf("region survey lists %v, want %v", ids, want)
	}
	// r1 is 5 ms from the rest of the region; r2 declines.
	r1 := func(id string) float64 {
		switch id {
		case "a", "bn":
			return 0.030
		}
		return 0.005
	}
	if _, err := a.Step(at(ts+1), Message{Type: MsgSurveyReport, From: "r2", To: "a", Token: sent[0].Token}); err != nil {
		t.Fatal(err)
	}
	r, err := a.Step(at(ts+1), report("r1", sent[0].Token, ids, r1))
	if err != nil {
		t.Fatal(err)
	}
	mv := msgs(r, MsgMove)
	if len(mv) != 1 || mv[0].To != "r1" || !hasEvent(r, EventRegionMoved) || mv[0].Token.Surveyed {
		t.Fatalf("want an unsettled move to r1 for the region, got %+v", r)
	}
}

// A region survey keeps the place when this holder's clients would lose
// more without it (the other holder is far from them) than the region
// would save, and the place then counts as surveyed.
func TestNode_RegionSurveyKeepsAPlaceItsClientsNeed(t *testing.T) {
	a, sent, ts := regionHolder(t, at2(0.3, 0), 1)
	var r Ready
	for _, m := range sent {
		var err error
		if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, func(string) float64 { return 0.005 })); err != nil {
			t.Fatal(err)
		}
	}
	if len(msgs(r, MsgMove)) != 0 || !hasEvent(r, EventSurveyKept) || !a.Surveyed() {
		t.Fatalf("want the place kept and surveyed, got %+v", r)
	}
}

// With a Capacity, a region survey's loss sends this holder's clients to
// the other holders' room only (C less the weights of their digests): the
// scene of TestNode_RegionSurveyMovesToARegionServedFromAfar moves the
// token while b has room for a's six clients, and keeps the place when b
// is full, where the clients would go unserved.
func TestNode_RegionSurveyWeighsTheRoomLeft(t *testing.T) {
	// b's digest: bn (10) and r1…r4 (3 each), 22 clients; a's six clients
	// and a itself need 7 more.
	for _, c := range []struct {
		capacity int
		move     bool
	}{{0, true}, {29, true}, {22, false}, {28, false}} {
		t.Run(fmt.Sprint(c.capacity), func(t *testing.T) {
			a, sent, ts := regionHolder(t, at2(0.022, 0), 3)
			a.cfg.Capacity = c.capacity // the survey sent, weighed under C
			r := answerRegion(t, a, sent, ts, 0.030)
			if moved := len(msgs(r, MsgMove)) == 1 && hasEvent(r, EventRegionMoved); moved != c.move {
				t.Fatalf("capacity %d: moved %v, want %v: %+v", c.capacity, moved, c.move, r)
			}
			if !c.move && !hasEvent(r, EventSurveyKept) {
				t.Fatalf("capacity %d: want the place kept, got %+v", c.capacity, r)
			}
		})
	}
}

// answerRegion has every candidate of the region survey sent answer a
// second after it: far from a and bn (far), 5 ms from the region's other
// points. It returns what a did with the last answer.
func answerRegion(t *testing.T, a *Node, sent []Message, ts, far float64) Ready {
	t.Helper()
	rtt := func(id string) float64 {
		if id == "a" || id == "bn" {
			return far
		}
		return 0.005
	}
	var r Ready
	for _, m := range sent {
		var err error
		if r, err = a.Step(at(ts+1), report(m.To, m.Token, m.Survey, rtt)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// A region survey counts what the holder itself loses without the token,
// as a client of the next holder, as it counts the candidate's own point
// saved: with b 80 ms off, the region's saving (0.6 × (150 + 3 × 145) =
// 351 ms) beats the six clients' loss (about 300 ms) but not theirs and
// a's together (about 380 ms). An 8-peer bed moved a token to a far
// outlier and back for minutes while the holder's own loss was left out.
func TestNode_RegionSurveyCountsTheHolderItself(t *testing.T) {
	for _, c := range []struct {
		w    float64
		move bool
	}{{0.6, false}, {0.8, true}} {
		a, sent, ts := regionHolder(t, at2(0.1, 0), c.w)
		r := answerRegion(t, a, sent, ts, 0.080)
		if moved := len(msgs(r, MsgMove)) == 1 && hasEvent(r, EventRegionMoved); moved != c.move {
			t.Fatalf("weight %v: moved %v, want %v: %+v", c.w, moved, c.move, r)
		}
	}
}

// A candidate saves the region's points their RTT now less its own, its own
// point all of it; under a capacity C only for the C clients that gain
// most, a point straddling the limit in part.
func TestRegionSaving(t *testing.T) {
	s := &survey{region: []Sample{
		{ID: "p", Weight: 4, RTT: 0.100},
		{ID: "q", Weight: 2, RTT: 0.050},
		{ID: "c", Weight: 3, RTT: 0.020},
		{ID: "u", Weight: 5, RTT: 0.010},
	}}
	rep := []float64{0.030, 0.040, 0.010, 0.005, 0.020} // the holder, then p, q, c, u
	for _, c := range []struct {
		capacity, want float64
	}{
		{0, 4*0.060 + 2*0.040 + 3*0.020}, // u is nearer its holder now
		{100, 4*0.060 + 2*0.040 + 3*0.020},
		{5, 4*0.060 + 1*0.040}, // p first, then one of q's two
		{4, 4 * 0.060},
	} {
		if got := regionSaving(s, "c", rep, c.capacity); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("capacity %v: saving %v, want %v", c.capacity, got, c.want)
		}
	}
	// An unmeasured point (-1) saves nothing.
	rep[1] = -1
	if got, want := regionSaving(s, "c", rep, 0), 2*0.040+3*0.020; math.Abs(got-want) > 1e-12 {
		t.Errorf("unmeasured p: saving %v, want %v", got, want)
	}
}
