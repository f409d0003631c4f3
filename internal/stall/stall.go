// Package stall watches this process for stalls: stretches in which a
// goroutine that was due to run could not, because the collector stopped the
// world or taxed every allocation, or because the process's goroutines
// outran its CPUs. An exchange timed across a stall measured the machine, not
// the network: on mocknet, where the links' delays are this process's own
// timers, a stall adds its length to every exchange in flight.
//
// A Watch runs one goroutine that sleeps a tick at a time and records every
// wake-up later than a threshold; Stalled says whether a time span overlaps
// one. The bookkeeping (observe, stalled) is pure and takes its times as
// arguments.
package stall

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ring is how many late wake-ups a Watch remembers. A span that began
// before the oldest of a full ring is taken as stalled (too many stalls
// since to tell).
const ring = 1024

// Stats is what a Watch has seen.
type Stats struct {
	Ticks uint64        // wake-ups
	Late  uint64        // wake-ups later than the threshold
	Worst time.Duration // the largest delay of a wake-up beyond its due time
	// Stalled is the late wake-ups' delays summed: the clock time the
	// process spent stalled by the threshold's measure.
	Stalled time.Duration
}

// Watch records this process's stalls. Safe for concurrent use.
type Watch struct {
	tick      time.Duration
	threshold atomic.Int64 // ns

	mu     sync.Mutex
	late   [ring]span // wake-ups later than the threshold, oldest overwritten
	n      int        // entries in late
	next   int        // where the next goes
	woke   time.Time  // the last wake-up
	stats  Stats
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once

	// onLate, if set, is told of every wake-up later than lateOver.
	lateOver time.Duration
	onLate   func(due, woke time.Time)
}

// span is one late wake-up: due, and woken at woke.
type span struct{ due, woke time.Time }

// New starts a Watch that wakes every tick and counts a wake-up more than
// threshold late as a stall. Close stops it.
func New(tick, threshold time.Duration) (*Watch, error) {
	w, err := newWatch(tick, threshold, time.Now())
	if err != nil {
		return nil, err
	}
	go w.run()
	return w, nil
}

// newWatch is a Watch that has not started its goroutine (tests drive
// observe themselves).
func newWatch(tick, threshold time.Duration, now time.Time) (*Watch, error) {
	if tick <= 0 || threshold <= 0 {
		return nil, errors.New("stall: tick and threshold must be positive")
	}
	w := &Watch{tick: tick, woke: now, stop: make(chan struct{}), done: make(chan struct{})}
	w.threshold.Store(int64(threshold))
	return w, nil
}

// OnLate has the watch call f with every wake-up later than over (its due
// time and when it came), from the watch's goroutine: f must return
// quickly. Call it before the stalls to be told of; nil f stops it.
func (w *Watch) OnLate(over time.Duration, f func(due, woke time.Time)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lateOver, w.onLate = over, f
}

// SetThreshold changes the delay beyond which a wake-up is a stall, for
// wake-ups from now on (a dilated swarm scales it with its time).
func (w *Watch) SetThreshold(d time.Duration) {
	if d > 0 {
		w.threshold.Store(int64(d))
	}
}

func (w *Watch) run() {
	defer close(w.done)
	t := time.NewTimer(w.tick)
	defer t.Stop()
	due := time.Now().Add(w.tick)
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		if f := w.observe(due, now); f != nil {
			f(due, now)
		}
		due = now.Add(w.tick)
		t.Reset(w.tick)
	}
}

// observe records a wake-up due at due that came at woke, and returns the
// OnLate callback if the wake-up is late enough for it.
func (w *Watch) observe(due, woke time.Time) func(due, woke time.Time) {
	delay := woke.Sub(due)
	w.mu.Lock()
	defer w.mu.Unlock()
	var notify func(due, woke time.Time)
	if w.onLate != nil && delay > w.lateOver {
		notify = w.onLate
	}
	w.woke = woke
	w.stats.Ticks++
	if delay > w.stats.Worst {
		w.stats.Worst = delay
	}
	if delay <= time.Duration(w.threshold.Load()) {
		return notify
	}
	w.stats.Late++
	w.stats.Stalled += delay
	w.late[w.next] = span{due: due, woke: woke}
	w.next = (w.next + 1) % ring
	w.n = min(w.n+1, ring)
	return notify
}

// Stalled reports whether the process stalled at some time between start
// and end: a late wake-up overlaps the span, or the watch itself has not
// woken for longer than a tick and the threshold before end (a stall under
// way).
func (w *Watch) Stalled(start, end time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if end.Sub(w.woke) > w.tick+time.Duration(w.threshold.Load()) {
		return true
	}
	for k := 0; k < w.n; k++ {
		s := w.late[(w.next-1-k+2*ring)%ring] // newest first
		if s.woke.Before(start) {
			return false // this and every older one ended before the span
		}
		if !s.due.After(end) {
			return true
		}
	}
	// Every remembered stall ended after start and began after end: the
	// span is clear unless the ring was full and older stalls were lost.
	return w.n == ring
}

// Stats is what the watch has seen so far.
func (w *Watch) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close stops the watch's goroutine; Stalled and Stats go on answering
// from what it saw.
func (w *Watch) Close() {
	w.closed.Do(func() {
		close(w.stop)
		<-w.done
	})
}
