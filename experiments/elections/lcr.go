package elections

import (
	"fmt"
	"time"
)

// LCR is Le Lann's and Chang and Roberts' election on a unidirectional
// ring: every node sends its ID to its successor; a node forwards an ID
// higher than its own and swallows a lower one; the node that gets its own
// ID back is the leader and sends ELECTED around the ring once.
type lcr struct {
	cfg    Config
	leader int
	sent   bool
}

type lcrElection struct{ ID int }
type lcrElected struct{ Leader, ID int }

func (lcrElection) Kind() string     { return "ELECTION" }
func (lcrElected) Kind() string      { return "ELECTED" }
func (m lcrElection) String() string { return fmt.Sprintf("id %d", m.ID) }
func (m lcrElected) String() string  { return fmt.Sprintf("leader id %d", m.ID) }

func newLCR(c Config) Node { return &lcr{cfg: c, leader: -1} }

func (n *lcr) next() int { return n.cfg.Neighbors[0] }

func (n *lcr) Start(_ time.Duration, o *Out) {
	if n.cfg.Initiator && !n.sent {
		n.sent = true
		o.Send(n.next(), lcrElection{ID: n.cfg.ID})
	}
}

func (n *lcr) Receive(_ time.Duration, _ int, m Message, o *Out) {
	switch m := m.(type) {
	case lcrElection:
		switch {
		case m.ID == n.cfg.ID:
			n.leader = n.cfg.Index
			o.Send(n.next(), lcrElected{Leader: n.cfg.Index, ID: n.cfg.ID})
		case m.ID > n.cfg.ID:
			// A node woken by a higher ID takes part too, but its own ID
			// cannot win; forwarding is enough.
			n.sent = true
			o.Send(n.next(), m)
		}
	case lcrElected:
		if m.Leader != n.cfg.Index {
			n.leader = m.Leader
			o.Send(n.next(), m)
		}
	}
}

func (n *lcr) Timeout(time.Duration, int, *Out) {}
func (n *lcr) Leader() int                      { return n.leader }

// ringIDs are IDs 1..n laid along the ring: decreasing in the direction
// messages travel (LCR's worst case: every ID travels until it meets a
// higher one) or increasing (its best case).
func ringIDs(n int, decreasing bool) []int {
	ids := make([]int, n)
	for i := range ids {
		if decreasing {
			ids[i] = n - i
		} else {
			ids[i] = i + 1
		}
	}
	return ids
}

func init() {
	for _, v := range []struct {
		variant, summary string
		ids              func(n int) []int
		bound            func(n int) float64
	}{
		{"", "unidirectional ring, unique random IDs, every node initiates: one leader, the highest ID; bound the worst case n(n+1)/2", nil,
			func(n int) float64 { return float64(n) * float64(n+1) / 2 }},
		{"worst", "IDs decreasing along the ring: n(n+1)/2 ELECTION messages exactly", func(n int) []int { return ringIDs(n, true) },
			func(n int) float64 { return float64(n) * float64(n+1) / 2 }},
		{"best", "IDs increasing along the ring: 2n−1 ELECTION messages exactly", func(n int) []int { return ringIDs(n, false) },
			func(n int) float64 { return float64(2*n - 1) }},
	} {
		v := v
		register(Algorithm{
			Name: "lcr", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				sc := Scenario{N: n, Seed: seed, Topology: Ring}
				if v.ids != nil {
					sc.IDs = v.ids(n)
				}
				return sc
			},
			New: newLCR, Check: CheckMaxID, Bound: v.bound, BoundKinds: []string{"ELECTION"},
			Sizes: []int{8, 16, 32, 64, 128, 256, 512}, Quick: []int{16, 64},
		})
	}
}
