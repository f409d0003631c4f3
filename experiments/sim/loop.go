package sim

import (
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// Loop runs events in virtual time. It is not safe for concurrent use.
type Loop struct {
	now time.Duration
	seq uint64
	q   eventHeap
	// Processed counts the events run so far.
	Processed uint64
}

type event struct {
	at  time.Duration
	seq uint64
	f   func()
}

// eventHeap is a binary min-heap of events by (at, seq), written out
// rather than through container/heap so that no event is boxed into an
// interface (an allocation per event at 10^7 events).
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	e := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = event{}
	q = q[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(q) {
			break
		}
		m := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return e
}

// Now is the current virtual time since the start of the run.
func (l *Loop) Now() time.Duration { return l.now }

// Pending is the number of events not yet run.
func (l *Loop) Pending() int { return len(l.q) }

// At schedules f at virtual time t; a time in the past runs at Now, after
// the events already due.
func (l *Loop) At(t time.Duration, f func()) {
	if t < l.now {
		t = l.now
	}
	l.seq++
	l.q.push(event{at: t, seq: l.seq, f: f})
}

// After schedules f d after Now.
func (l *Loop) After(d time.Duration, f func()) { l.At(l.now+d, f) }

// Step runs the next event, if any, and reports whether it ran one.
func (l *Loop) Step() bool {
	if len(l.q) == 0 {
		return false
	}
	e := l.q.pop()
	l.now = e.at
	l.Processed++
	e.f()
	return true
}

// RunUntil runs every event due at or before t, then sets Now to t.
func (l *Loop) RunUntil(t time.Duration) {
	for len(l.q) > 0 && l.q[0].at <= t {
		l.Step()
	}
	if t > l.now {
		l.now = t
	}
}

// RunWhile runs events while cond holds and events remain before limit.
func (l *Loop) RunWhile(limit time.Duration, cond func() bool) {
	for len(l.q) > 0 && l.q[0].at <= limit && cond() {
		l.Step()
	}
}

// Net is a loop whose messages take the one-way delay of a latency space.
type Net struct {
	*Loop
	RTT latency.RTTs
	// Messages counts Send calls.
	Messages uint64
}

// NewNet makes a network over rtt with a fresh loop.
func NewNet(rtt latency.RTTs) *Net { return &Net{Loop: &Loop{}, RTT: rtt} }

// Delay is the one-way delay from i to j: half their RTT. A Missing pair
// has no delay and Send drops its messages.
func (n *Net) Delay(i, j int) time.Duration {
	return Delay(n.RTT, i, j)
}

// Delay is RTT(i, j)/2 of rtt as a duration (negative for a Missing pair).
func Delay(rtt latency.RTTs, i, j int) time.Duration {
	r := rtt.RTT(i, j)
	if r < 0 {
		return -1
	}
	return time.Duration(r * float64(time.Millisecond) / 2)
}

// Send delivers a message from i to j: deliver runs after the one-way
// delay. It reports false, running nothing, for a Missing link.
func (n *Net) Send(i, j int, deliver func()) bool {
	d := n.Delay(i, j)
	if d < 0 {
		return false
	}
	n.Messages++
	n.After(d, deliver)
	return true
}
