package latency

import (
	"fmt"
	"math/rand"
)

// DefaultIntraSiteRTT is the RTT between two peers placed on one host (ms):
// a LAN round trip.
const DefaultIntraSiteRTT = 0.5

// Placement maps n peers onto the hosts of a base space and is itself the
// peers' RTT space. With n ≤ hosts every peer gets a host of its own, chosen
// at random; with more peers than hosts they are spread round-robin over a
// random order of the hosts, and peers sharing a host are IntraSiteRTT apart.
type Placement struct {
	base         RTTs
	host         []int
	IntraSiteRTT float64
}

// Place maps n peers onto base with a seeded shuffle. base must know every
// pair (use Matrix.Filled for a matrix with missing entries).
func Place(base RTTs, n int, seed int64) (*Placement, error) {
	h := base.Len()
	if h == 0 {
		return nil, fmt.Errorf("latency: cannot place %d peers on an empty space", n)
	}
	if n < 0 {
		return nil, fmt.Errorf("latency: cannot place %d peers", n)
	}
	perm := rand.New(rand.NewSource(seed)).Perm(h)
	p := &Placement{base: base, host: make([]int, n), IntraSiteRTT: DefaultIntraSiteRTT}
	for i := range p.host {
		p.host[i] = perm[i%h]
	}
	return p, nil
}

// Len is the number of peers.
func (p *Placement) Len() int { return len(p.host) }

// Host is the base host of peer i.
func (p *Placement) Host(i int) int { return p.host[i] }

// RTT between peers i and j in ms.
func (p *Placement) RTT(i, j int) float64 {
	if i == j {
		return 0
	}
	hi, hj := p.host[i], p.host[j]
	if hi == hj {
		return p.IntraSiteRTT
	}
	return p.base.RTT(hi, hj)
}
