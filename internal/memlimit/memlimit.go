// Package memlimit holds a process's resident set near a target by steering
// the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit).
//
// The runtime's limit bounds what the runtime maps and has not returned to
// the operating system (/memory/classes/total less
// /memory/classes/heap/released). The resident set holds more: the
// binary's text and data pages that the process touched, and anything
// mapped outside the runtime, so a limit set to the target lets RSS end that
// much above it. A Holder reads both every period and sets the runtime's limit to the
// target less what RSS holds beyond the runtime's own count, so RSS, not
// the runtime's count, is what stays near the target.
//
// Limit is the pure rule; Holder is the goroutine around it.
package memlimit

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reading is one look at the process's memory.
type Reading struct {
	// RSS is the resident set size in bytes (/proc/self/statm).
	RSS uint64
	// Runtime is what the runtime's memory limit counts: every byte the
	// runtime has mapped less what it returned to the operating system.
	Runtime uint64
}

// Outside is how much of the resident set the runtime's limit does not
// count (0 when the runtime counts more than is resident, as it does for
// free pages it has not yet touched).
func (r Reading) Outside() uint64 {
	if r.RSS <= r.Runtime {
		return 0
	}
	return r.RSS - r.Runtime
}

// Limit is the runtime limit that holds RSS at target given r: target less
// what RSS holds outside the runtime's count, but never below half the
// target (a process whose binary alone outweighed its target would
// otherwise leave its collector running without end).
func Limit(target uint64, r Reading) int64 {
	l := target - min(r.Outside(), target/2)
	return int64(min(l, uint64(1<<63-1)))
}

// Read takes a Reading of this process. RSS is 0 where /proc is missing.
func Read() Reading {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	var r Reading
	if s[0].Value.Kind() == metrics.KindUint64 && s[1].Value.Kind() == metrics.KindUint64 {
		r.Runtime = s[0].Value.Uint64() - min(s[1].Value.Uint64(), s[0].Value.Uint64())
	}
	r.RSS = RSS()
	return r
}

// RSS is this process's resident set size in bytes, from /proc (0 where it
// cannot be read).
func RSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// Holder steers the runtime's memory limit so that RSS stays near a
// target. Start one with Hold; Stop restores the limit that was set before.
type Holder struct {
	target uint64
	prev   int64
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu   sync.Mutex
	last int64 // the limit set last
}

// Hold sets the runtime's memory limit for target bytes of RSS now and
// again every period until Stop. Where RSS cannot be read (no /proc) it
// leaves the limit at target, as debug.SetMemoryLimit(target) would.
func Hold(target uint64, period time.Duration) *Holder {
	h := &Holder{target: target, stop: make(chan struct{}), done: make(chan struct{})}
	h.prev = debug.SetMemoryLimit(-1)
	h.set()
	go func() {
		defer close(h.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				h.set()
			}
		}
	}()
	return h
}

func (h *Holder) set() {
	// Without an RSS reading nothing counts as outside: the target.
	l := Limit(h.target, Read())
	debug.SetMemoryLimit(l)
	h.mu.Lock()
	h.last = l
	h.mu.Unlock()
}

// Current is the limit the Holder set last.
func (h *Holder) Current() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Stop ends the holding and restores the limit set before Hold. Safe to
// call more than once.
func (h *Holder) Stop() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		debug.SetMemoryLimit(h.prev)
	})
}
