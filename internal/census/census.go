// Package census is the pure core of a superpeer count that follows a
// fraction of the network (Lo et al.'s third requirement, "a predefined
// portion of the peers are superpeers", as the network grows and shrinks),
// agreed without a coordinator. No clock, network or randomness of its own:
// time, reports and digests in, the agreed count out.
//
// # The agreed value
//
// Every peer holds a Value: the superpeer count S and the version that set
// it. Values are totally ordered (Beats: the higher version, then the larger
// S), and a peer adopts any value that beats its own, wherever it hears it —
// a superpeer's answer, a token announcement, a digest — so all peers end
// on the freshest one. A peer that joins late starts from its own
// configuration's value (version 0) and takes the network's from the first
// answer it gets; a peer that disagrees loses to every version above its
// own, and two proposals of one version resolve to the larger S everywhere.
//
// # Counting
//
// Superpeers know their load exactly: themselves and the clients attached to
// them. Each reports it (Report) with the share of the network it stands for
// in expectation (a prefix group's share of the key space; 1/S for a token)
// under the value it holds, and the superpeers exchange their tables
// (Digest, Merge) by anti-entropy gossip, so each learns every superpeer's
// latest report within O(log S) rounds. The reported peers over the shares
// they stand for is the network size n̂: the exact sum when the table covers
// every superpeer and every peer is attached once; past MaxReports
// superpeers, a ratio estimate from the most recently heard sample, whose
// relative error is about 1/sqrt(n·(sample's share)): about 1% with 128
// reports of 100 peers each. Reports expire when not refreshed (a dead superpeer's
// clients re-attach elsewhere and are counted there), and a new value
// discards the reports made under older ones (the superpeers and their
// loads change with S).
//
// # Deciding, with hysteresis
//
// A superpeer proposes a new value — S' = round(f·n̂) within [Min, Max], the
// version one above its own, n̂ the median of its own estimate and those
// its table's reports carry (each superpeer's estimate when it reported) —
// when f·n̂ has left the band around S (Target) and so has f times its own
// table's estimate, on the same side, its
// table holds reports from at least half of S superpeers under the current
// value (Quorum; or MaxReports + 1 of them: a table of a few reports
// extrapolates from too few groups; not all S by default, as some groups of
// a small network are empty and never report), it found the count outside
// the band on Confirm ticks in a row spanning ConfirmFor (20 s), and the
// current value is at least
// HoldDown old (loads move after every change). Superpeers whose tables
// agree propose the same value at about the same time; otherwise the order
// of values picks one. The band — Hysteresis of S, at least Slack in
// absolute terms — keeps S from flapping while n jitters around a boundary:
// to go back, f·n̂ has to cross the whole band.
package census

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Value is an agreed superpeer count.
type Value struct {
	S       int
	Version uint64
}

// Beats reports whether v is fresher than o: a higher version, or the same
// version and a larger S.
func (v Value) Beats(o Value) bool {
	if v.Version != o.Version {
		return v.Version > o.Version
	}
	return v.S > o.S
}

func (v Value) String() string { return fmt.Sprintf("S=%d (v%d)", v.S, v.Version) }

// Entry is one superpeer's report: the peers it accounts for (itself and
// its clients) and the share of the network it stands for in expectation
// (under prefix its group's share of the key space, under repel 1/S), made
// under Version, numbered by the reporter (Seq) so that a fresher report
// replaces an older one wherever it travels.
type Entry struct {
	ID      string
	Peers   int
	Share   float64
	Version uint64
	Seq     uint64
	// Estimate is the network size the reporter's own table added up to
	// when it reported (0: none yet). A proposal goes by the median of the
	// estimates a table holds, not by one table's: with thousands of
	// superpeers one table always strays past the band.
	Estimate float64
}

// minShare is the least share a report may stand for: a group of the
// finest prefix code (2^32 groups), with room to spare. A smaller one would
// make one report stand for an absurd network.
const minShare = 0x1p-40

func (e Entry) valid() bool {
	return e.ID != "" && e.Peers >= 1 && e.Share >= minShare && e.Share <= 1 &&
		!math.IsNaN(e.Estimate) && e.Estimate >= 0 && e.Estimate <= maxEstimate
}

// maxEstimate bounds a reported estimate: 2^32 groups of 2^32 peers.
const maxEstimate = 0x1p64

// Config sets the fraction and the dynamics.
type Config struct {
	// Fraction is f: the superpeer count follows f·n.
	Fraction float64
	// Hysteresis is the band around S, relative (default 0.05), and Slack
	// its least absolute width (default 0.6: with S small, f·n must pass
	// S ± 0.6 before S moves by one).
	Hysteresis, Slack float64
	// Min is the least S (default 1), Max the most (default 2^32, the
	// finest prefix code).
	Min, Max int
	// HoldDown is how old the current value must be before this peer
	// proposes another (default 30 s).
	HoldDown time.Duration
	// Expire drops a report not refreshed for this long (default 90 s).
	Expire time.Duration
	// MaxReports bounds the reports of others a peer keeps and sends
	// (default 128; the most recently heard stay): with more superpeers
	// than that, the size is extrapolated from a sample of them.
	MaxReports int
	// Confirm is how many ticks in a row must find the count outside the
	// band before this peer proposes (default 2): one table that strays —
	// of a thousand superpeers one always does — does not move everyone.
	Confirm int
	// ConfirmFor is how long, besides, those ticks must span (default
	// 20 s): a report's estimate is as old as the gossip that brought it,
	// so while clients are still attaching (a start, a new superpeer, a
	// change of S) the median of the estimates trails the network, and a
	// count outside the band for a few rounds is not yet the network's;
	// where reports are refreshed only every so often, a client that
	// moved between two superpeers is counted by both until the first
	// reports again, and a count outside the band for a whole refresh
	// is not that.
	ConfirmFor time.Duration
	// Quorum is the share of S whose reports a table must hold under the
	// current value before its peer proposes (default 0.5; at most
	// MaxReports + 1 reports are asked for). Where every superpeer's
	// report reaches every peer (the token method's announcements) 1
	// waits for all of them: none is then still placing its token and
	// gathering its clients, and the table's own sum, exact, decides
	// rather than the median of the estimates the reports carry (made
	// when their tables were less complete).
	Quorum float64
	// Group, if set, names the part of the network a reporter stands for
	// under the count S (the prefix method: its group of the exact code
	// of S). Reports of one group count as one — their peers summed, the
	// share once — so that two peers that both take themselves for a
	// group's superpeer (a lookup that missed the true one) do not count
	// the group's share twice and the network short: each member is
	// attached to one of them at most. Without it every reporter stands
	// for a part of its own.
	Group func(id string, s int) int
}

// ErrConfig wraps every invalid Config.
var ErrConfig = errors.New("census: bad config")

func (c *Config) fill() error {
	if math.IsNaN(c.Fraction) || c.Fraction <= 0 || c.Fraction > 1 {
		return fmt.Errorf("%w: fraction %v not in (0, 1]", ErrConfig, c.Fraction)
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = 0.05
	}
	if c.Slack == 0 {
		c.Slack = 0.6
	}
	if math.IsNaN(c.Hysteresis) || c.Hysteresis < 0 || c.Hysteresis >= 0.5 {
		return fmt.Errorf("%w: hysteresis %v not in [0, 0.5)", ErrConfig, c.Hysteresis)
	}
	if math.IsNaN(c.Slack) || c.Slack < 0.5 || c.Slack > 10 {
		// Below half a superpeer the band is narrower than the rounding:
		// S would move back and forth on the same f·n.
		return fmt.Errorf("%w: slack %v not in [0.5, 10]", ErrConfig, c.Slack)
	}
	if c.Min == 0 {
		c.Min = 1
	}
	if c.Max == 0 {
		c.Max = 1 << 32
	}
	if c.Min < 1 || c.Max < c.Min {
		return fmt.Errorf("%w: min %d and max %d: want 1 ≤ min ≤ max", ErrConfig, c.Min, c.Max)
	}
	if c.HoldDown == 0 {
		c.HoldDown = 30 * time.Second
	}
	if c.Expire == 0 {
		c.Expire = 90 * time.Second
	}
	if c.MaxReports == 0 {
		c.MaxReports = 128
	}
	if c.Confirm == 0 {
		c.Confirm = 2
	}
	if c.Quorum == 0 {
		c.Quorum = 0.5
	}
	if c.ConfirmFor == 0 {
		c.ConfirmFor = 20 * time.Second
	}
	if math.IsNaN(c.Quorum) || c.Quorum < 0 || c.Quorum > 1 {
		return fmt.Errorf("%w: quorum %v not in (0, 1]", ErrConfig, c.Quorum)
	}
	if c.Confirm < 1 {
		return fmt.Errorf("%w: confirm %d below 1", ErrConfig, c.Confirm)
	}
	if c.MaxReports < 1 {
		return fmt.Errorf("%w: max reports %d below 1", ErrConfig, c.MaxReports)
	}
	if c.HoldDown < 0 || c.Expire <= 0 || c.ConfirmFor < 0 {
		return fmt.Errorf("%w: hold-down %v and expiry %v must be positive", ErrConfig, c.HoldDown, c.Expire)
	}
	return nil
}

// Filled is c with its defaults filled in, or the error New would give.
func (c Config) Filled() (Config, error) {
	err := c.fill()
	return c, err
}

// Target is the count a peer with estimate n and current count cur wants:
// cur while f·n stays within the band around it, else round(f·n) within
// [Min, Max]. With cur 0 (no count yet) it is round(f·n) within [Min, Max].
func (c Config) Target(n float64, cur int) int {
	x := c.Fraction * n
	if math.IsNaN(x) || x < 0 {
		x = 0
	}
	want := c.Min
	if x >= float64(c.Max) {
		want = c.Max
	} else {
		want = min(c.Max, max(c.Min, int(math.Round(x))))
	}
	if cur <= 0 {
		return want
	}
	band := max(c.Slack, c.Hysteresis*float64(cur))
	if math.Abs(x-float64(cur)) <= band {
		return cur
	}
	return want
}

type entry struct {
	Entry
	heard time.Time
}

// Census is one peer's view: the agreed value, and for a superpeer the
// table of reports.
type Census struct {
	cfg          Config
	self         string
	val          Value
	since        time.Time // when val was adopted or proposed here
	table        map[string]*entry
	seq          uint64
	started      bool
	outside      int       // ticks in a row that found the count outside the band
	outsideSince time.Time // the first of them
}

// New makes a census for the peer named self, starting from the value
// initial (its configuration's S, version 0).
func New(cfg Config, self string, initial Value) (*Census, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if initial.S < cfg.Min {
		return nil, fmt.Errorf("%w: initial S %d below min %d", ErrConfig, initial.S, cfg.Min)
	}
	return &Census{cfg: cfg, self: self, val: initial, table: map[string]*entry{}}, nil
}

// Value is the agreed value as this peer holds it.
func (c *Census) Value() Value { return c.val }

func (c *Census) start(now time.Time) {
	if !c.started {
		c.started = true
		c.since = now
	}
}

// Observe takes v if it beats the value held, and reports whether it did.
func (c *Census) Observe(now time.Time, v Value) bool {
	c.start(now)
	if v.S < c.cfg.Min || v.S > c.cfg.Max || !v.Beats(c.val) {
		return false
	}
	c.adopt(now, v)
	return true
}

func (c *Census) adopt(now time.Time, v Value) {
	c.val, c.since, c.outside = v, now, 0
	for id, e := range c.table {
		if e.Version < v.Version {
			delete(c.table, id)
		}
	}
}

// Report records this peer's own load as a superpeer: peers is itself and
// its clients, share the part of the network it stands for in expectation
// (a share outside (0, 1] withdraws the report).
func (c *Census) Report(now time.Time, peers int, share float64) {
	c.start(now)
	c.seq++
	est, reports := c.Size(now)
	if !c.quorate(reports) {
		est = 0 // from too few reports: no estimate yet (a median would take it)
	}
	e := Entry{ID: c.self, Peers: max(peers, 1), Share: share, Version: c.val.Version, Seq: c.seq, Estimate: est}
	if !e.valid() {
		c.Withdraw()
		return
	}
	c.table[c.self] = &entry{Entry: e, heard: now}
}

// Withdraw removes this peer's own report: it is no longer a superpeer.
func (c *Census) Withdraw() { delete(c.table, c.self) }

// Own is this peer's own latest report, if it holds one.
func (c *Census) Own() (Entry, bool) {
	if e, ok := c.table[c.self]; ok {
		return e.Entry, true
	}
	return Entry{}, false
}

// Forget drops the report of superpeer id (not this peer's own): another
// peer now stands for what it reported, as when a token changes holder,
// so its last report would count those peers twice until it expired.
func (c *Census) Forget(id string) {
	if id != c.self {
		delete(c.table, id)
	}
}

// Merge takes another superpeer's digest and its value. Reports made under
// an older value than the one held are ignored, a newer value is adopted
// first, and of two reports by one superpeer the higher Seq stays.
func (c *Census) Merge(now time.Time, v Value, entries []Entry) {
	c.Observe(now, v)
	for _, e := range entries {
		if !e.valid() || e.ID == c.self || e.Version != c.val.Version {
			continue
		}
		if old := c.table[e.ID]; old == nil || e.Seq > old.Seq {
			c.table[e.ID] = &entry{Entry: e, heard: now}
		}
	}
	c.trim()
}

// trim keeps the MaxReports most recently heard reports of others.
func (c *Census) trim() {
	others := len(c.table)
	if _, mine := c.table[c.self]; mine {
		others--
	}
	if others <= c.cfg.MaxReports {
		return
	}
	var es []*entry
	for id, e := range c.table {
		if id != c.self {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool {
		if !es[i].heard.Equal(es[j].heard) {
			return es[i].heard.After(es[j].heard)
		}
		return es[i].ID < es[j].ID
	})
	for _, e := range es[c.cfg.MaxReports:] {
		delete(c.table, e.ID)
	}
}

func (c *Census) expire(now time.Time) {
	for id, e := range c.table {
		if id != c.self && now.Sub(e.heard) >= c.cfg.Expire {
			delete(c.table, id)
		}
	}
}

// Digest is the reports this peer holds (its own included), for another
// superpeer, ordered by ID.
func (c *Census) Digest(now time.Time) []Entry {
	c.expire(now)
	out := make([]Entry, 0, len(c.table))
	for _, e := range c.table {
		out = append(out, e.Entry)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Size is the network size the table estimates — the peers reported over
// the share they stand for: the exact sum when the reports cover the whole
// network — and how many superpeers' reports it holds (how many groups',
// with Config.Group).
func (c *Census) Size(now time.Time) (n float64, reports int) {
	c.expire(now)
	var peers, share float64
	var groups map[int]float64 // with Config.Group: each group's share, once
	if c.cfg.Group != nil {
		groups = make(map[int]float64, len(c.table))
	}
	for _, e := range c.table {
		peers += float64(e.Peers)
		if groups == nil {
			share += e.Share
			reports++
			continue
		}
		g := c.cfg.Group(e.ID, c.val.S)
		groups[g] = max(groups[g], e.Share)
	}
	for _, sh := range groups {
		share += sh
		reports++
	}
	if share <= 0 {
		return 0, 0
	}
	return peers / share, reports
}

// quorate reports whether a table of this many reports is enough to
// estimate the network's size by: those of Quorum of S superpeers under
// the value held, or of MaxReports + 1.
func (c *Census) quorate(reports int) bool {
	return reports >= min(int(math.Ceil(c.cfg.Quorum*float64(c.val.S))), c.cfg.MaxReports+1)
}

// median is the median of the estimates the table's reports carry and this
// peer's own (n).
func (c *Census) median(n float64) float64 {
	ests := []float64{n}
	for id, e := range c.table {
		if id != c.self && e.Estimate > 0 {
			ests = append(ests, e.Estimate)
		}
	}
	sort.Float64s(ests)
	m := len(ests) / 2
	if len(ests)%2 == 1 {
		return ests[m]
	}
	return (ests[m-1] + ests[m]) / 2
}

// Tick expires old reports and, for a superpeer whose table is complete and
// whose value is old enough, proposes a new value if the size calls for
// one. It reports the value held and whether this tick changed it.
func (c *Census) Tick(now time.Time) (Value, bool) {
	c.start(now)
	if _, mine := c.table[c.self]; !mine || now.Sub(c.since) < c.cfg.HoldDown {
		return c.val, false
	}
	n, reports := c.Size(now)
	if !c.quorate(reports) {
		return c.val, false
	}
	own := n
	if c.cfg.Quorum < 1 || reports < c.val.S {
		n = c.median(n)
	} // else every superpeer's report is in: the sum is the count itself
	want := c.cfg.Target(n, c.val.S)
	// The median and this peer's own table must both find the count
	// outside the band, on the same side: the median keeps one stray
	// table from moving everyone, and the table, made of the latest
	// reports, keeps the median — of estimates as old as the gossip that
	// brought them, each made from reports older still — from proposing
	// what the network was while clients were still attaching.
	if mine := c.cfg.Target(own, c.val.S); cmp.Compare(want, c.val.S) != cmp.Compare(mine, c.val.S) {
		want = c.val.S
	}
	if want == c.val.S {
		c.outside = 0
		return c.val, false
	}
	if c.outside == 0 {
		c.outsideSince = now
	}
	if c.outside++; c.outside < c.cfg.Confirm || now.Sub(c.outsideSince) < c.cfg.ConfirmFor {
		return c.val, false
	}
	c.adopt(now, Value{S: want, Version: c.val.Version + 1})
	return c.val, true
}
