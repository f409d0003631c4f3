// Package limits holds what the stream protocols limit a remote peer with
// beyond their frame caps: PerPeer, a token bucket per remote peer that a
// handler asks before it reads a frame that costs it work (an attach
// request, a census digest, a Vivaldi request, a survey, a move or an
// announcement), and Refusals, the count of what go-libp2p's resource
// manager refused, by scope (rcmgr.WithMetrics).
//
// PerPeer is pure: it reads no clock (the caller passes the time) and
// starts no goroutine.
package limits

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// DefaultPeers is how many peers a PerPeer tracks unless told otherwise.
const DefaultPeers = 1024

// PerPeer is a token bucket per remote peer: each holds up to Burst
// tokens, refilled at Rate a second, and a frame takes one. It tracks at
// most Peers peers; a new one past that takes the place of the peer seen
// least recently, which starts again with a full bucket when it comes
// back (an idle peer's bucket is full anyway). A nil *PerPeer allows
// everything. Safe for concurrent use.
type PerPeer struct {
	rate, burst float64
	max         int

	mu    sync.Mutex
	peers map[string]*list.Element
	lru   list.List // of *bucket, the most recently seen first
}

type bucket struct {
	peer   string
	tokens float64
	at     time.Time
}

// NewPerPeer is a PerPeer refilling rate tokens a second into buckets of
// burst (at least 1) for at most peers peers (DefaultPeers if peers ≤ 0).
// A rate ≤ 0 (or NaN) is no limit: NewPerPeer returns nil, which allows
// everything.
func NewPerPeer(rate float64, burst, peers int) *PerPeer {
	if !(rate > 0) || math.IsInf(rate, 1) {
		return nil
	}
	if peers <= 0 {
		peers = DefaultPeers
	}
	return &PerPeer{rate: rate, burst: float64(max(burst, 1)), max: peers, peers: make(map[string]*list.Element)}
}

// Allow takes a token from p's bucket at now and reports whether there was
// one. A clock that goes back refills nothing.
func (l *PerPeer) Allow(now time.Time, p string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if e, ok := l.peers[p]; ok {
		l.lru.MoveToFront(e)
		b = e.Value.(*bucket)
		if dt := now.Sub(b.at).Seconds(); dt > 0 {
			b.tokens = min(l.burst, b.tokens+dt*l.rate)
			b.at = now
		}
	} else {
		if l.lru.Len() >= l.max {
			old := l.lru.Back()
			delete(l.peers, old.Value.(*bucket).peer)
			l.lru.Remove(old)
		}
		b = &bucket{peer: p, tokens: l.burst, at: now}
		l.peers[p] = l.lru.PushFront(b)
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Len is how many peers the limiter tracks now.
func (l *PerPeer) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}

// Rate and Burst are the limiter's refill rate (a second) and bucket size
// (0 for a nil limiter: no limit).
func (l *PerPeer) Rate() float64 {
	if l == nil {
		return 0
	}
	return l.rate
}

func (l *PerPeer) Burst() int {
	if l == nil {
		return 0
	}
	return int(l.burst)
}
