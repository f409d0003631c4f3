package stall

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// tickFrom drives w n wake-ups from ms on, a tick (1 ms) after the last,
// the k-th late by late(k) ms, and returns when the last woke (ms).
func tickFrom(w *Watch, from float64, n int, late func(k int) float64) float64 {
	due, woke := from, from
	for k := range n {
		woke = due + late(k)
		w.observe(at(due), at(woke))
		due = woke + 1
	}
	return woke
}

func TestWatch_StalledOnlyAcrossALateWakeUp(t *testing.T) {
	w, err := newWatch(time.Millisecond, 2*time.Millisecond, at(0))
	if err != nil {
		t.Fatal(err)
	}
	// Wake-ups 1 ms apart from 1 ms: the 99th (due at 100 ms) comes 30 ms
	// late, the 269th (due at 300 ms) 2 ms late (at the threshold: not a
	// stall), every other on time.
	tickFrom(w, 1, 300, func(k int) float64 {
		switch k {
		case 99:
			return 30
		case 269:
			return 2
		}
		return 0
	})
	for _, c := range []struct {
		start, end float64
		want       bool
	}{
		{10, 90, false},   // before it
		{90, 110, true},   // across its start
		{110, 120, true},  // inside it
		{125, 140, true},  // across its end (woken at ~130)
		{135, 290, false}, // after it
		{290, 310, false}, // across the wake-up at the threshold
		{50, 395, true},   // around it
	} {
		if got := w.Stalled(at(c.start), at(c.end)); got != c.want {
			t.Errorf("Stalled(%v ms, %v ms) = %v, want %v", c.start, c.end, got, c.want)
		}
	}
	st := w.Stats()
	if st.Late != 1 || st.Worst != 30*time.Millisecond || st.Ticks != 300 {
		t.Errorf("stats %+v: want 1 late, worst 30ms, 300 ticks", st)
	}
}

func TestWatch_AStallUnderWayIsAStall(t *testing.T) {
	w, _ := newWatch(time.Millisecond, 2*time.Millisecond, at(0))
	if last := tickFrom(w, 1, 100, func(int) float64 { return 0 }); last != 100 {
		t.Fatalf("last wake-up at %v ms", last)
	}
	// The watch last woke at 100 ms: a span ending 102 ms is clear, one
	// ending 110 ms is not (the watch is 9 ms overdue).
	if w.Stalled(at(95), at(102)) {
		t.Error("a span ending within a tick and the threshold of the last wake-up was called stalled")
	}
	if !w.Stalled(at(95), at(110)) {
		t.Error("a span ending 10 ms after the watch last woke was not called stalled")
	}
}

func TestWatch_AFullRingCannotClearAnOldSpan(t *testing.T) {
	w, _ := newWatch(time.Millisecond, time.Millisecond, at(0))
	// ring+10 late wake-ups, 5 ms late each, then on time.
	tickFrom(w, 1, ring+20, func(k int) float64 {
		if k >= ring+10 {
			return 0
		}
		return 5
	})
	// A span from the very start: its early stalls are no longer
	// remembered, so it must not be called clear.
	if !w.Stalled(at(0.5), at(1)) {
		t.Error("a span older than a full ring's oldest stall was called clear")
	}
	if w.Stats().Late != uint64(ring+10) {
		t.Errorf("late %d, want %d", w.Stats().Late, ring+10)
	}
}

func TestNew_RefusesNonPositive(t *testing.T) {
	for _, c := range [][2]time.Duration{{0, time.Millisecond}, {time.Millisecond, 0}, {-1, -1}} {
		if _, err := New(c[0], c[1]); err == nil {
			t.Errorf("New(%v, %v) accepted", c[0], c[1])
		}
	}
}

// A real stall: every P busy with goroutines that never yield for 60 ms.
// The watch's goroutine waits for a preemption to run, late by at least
// several ms.
func TestWatch_SeesTheProcessStall(t *testing.T) {
	w, err := New(time.Millisecond, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Ticks < 10 {
		if time.Now().After(deadline) {
			t.Fatal("the watch did not tick")
		}
		runtime.Gosched()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for time.Since(start) < 60*time.Millisecond {
				x++
			}
			_ = x
		}()
	}
	wg.Wait()
	end := time.Now()
	// Let the watch wake past the stall before asking.
	for w.Stats().Ticks < 20 || time.Since(end) < 5*time.Millisecond {
		runtime.Gosched()
	}
	if !w.Stalled(start, end) {
		t.Errorf("60 ms with every P busy not seen as a stall; stats %+v", w.Stats())
	}
	w.Close()
	w.Close() // twice is fine
}

func TestWatch_OnLateOnlyBeyondItsBound(t *testing.T) {
	w, err := newWatch(time.Millisecond, 2*time.Millisecond, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if f := w.observe(at(1), at(50)); f != nil {
		t.Fatal("a callback before OnLate was set")
	}
	var told []float64
	w.OnLate(10*time.Millisecond, func(due, woke time.Time) { told = append(told, float64(woke.Sub(due))/float64(time.Millisecond)) })
	for _, c := range []struct{ due, woke float64 }{{100, 101}, {200, 205}, {300, 310}, {400, 430}} {
		if f := w.observe(at(c.due), at(c.woke)); f != nil {
			f(at(c.due), at(c.woke))
		}
	}
	if len(told) != 1 || told[0] != 30 {
		t.Fatalf("told of %v ms late, want only the 30 ms wake-up (5 is a stall under the bound, 10 at it)", told)
	}
	if st := w.Stats(); st.Late != 4 || st.Stalled != (49+5+10+30)*time.Millisecond {
		t.Fatalf("stats %+v: want 4 late wake-ups whose delays sum to 94 ms", st)
	}
}
