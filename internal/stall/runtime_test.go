package stall

import (
	"math"
	"runtime"
	"runtime/metrics"
	"testing"
)

func TestQuantile_BucketUpperBounds(t *testing.T) {
	// Buckets [0,1) [1,2) [2,4) [4,+Inf): 10, 0, 89, 1.
	h := &metrics.Float64Histogram{Buckets: []float64{0, 1, 2, 4, math.Inf(1)}, Counts: []uint64{10, 0, 89, 1}}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 1}, {0.10, 1}, {0.11, 4}, {0.5, 4}, {0.99, 4}, {1, 4}, // the last, unbounded bucket: its lower bound
	} {
		if got := quantile(h, c.q); got != c.want {
			t.Errorf("quantile(%g) = %g, want %g", c.q, got, c.want)
		}
	}
	if got := quantile(&metrics.Float64Histogram{Buckets: []float64{0, 1}, Counts: []uint64{0}}, 0.5); got != 0 {
		t.Errorf("empty histogram: %g, want 0", got)
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("nil histogram: %g, want 0", got)
	}
}

func TestSubHist_WhatASpanAdded(t *testing.T) {
	b := []float64{0, 1, 2, math.Inf(1)}
	before := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{5, 1, 0}}
	after := &metrics.Float64Histogram{Buckets: b, Counts: []uint64{5, 1, 3}}
	d := subHist(after, before)
	if d.Counts[0] != 0 || d.Counts[1] != 0 || d.Counts[2] != 3 {
		t.Fatalf("difference %v, want [0 0 3]", d.Counts)
	}
	if got := quantile(d, 0.5); got != 2 {
		t.Errorf("median of the span %g, want 2 (only the last bucket gained)", got)
	}
	if after.Counts[2] != 3 {
		t.Error("subHist changed its argument")
	}
	if s := addHist(before, after); s.Counts[0] != 10 || s.Counts[2] != 3 {
		t.Errorf("sum %v, want [10 2 3]", s.Counts)
	}
}

func TestReadRuntime_CountsACollection(t *testing.T) {
	before := ReadRuntime()
	var keep [][]byte
	for range 64 {
		keep = append(keep, make([]byte, 64<<10))
	}
	runtime.GC()
	runtime.KeepAlive(keep)
	r := ReadRuntime().Since(before)
	if r.GCCycles < 1 {
		t.Errorf("a forced collection counted %d cycles", r.GCCycles)
	}
	if r.GCShare < 0 || r.GCShare > 1 || r.AssistShare < 0 || r.AssistShare > r.GCShare+1e-9 {
		t.Errorf("shares out of range: gc %g, assist %g", r.GCShare, r.AssistShare)
	}
	if r.PauseMs[1] <= 0 || r.PauseMs[0] > r.PauseMs[1] {
		t.Errorf("the collection's pauses p99 %g, max %g ms: want 0 < p99 ≤ max", r.PauseMs[0], r.PauseMs[1])
	}
	for i := 1; i < len(r.SchedMs); i++ {
		if r.SchedMs[i] < r.SchedMs[i-1] {
			t.Errorf("scheduling latencies not ordered: %v", r.SchedMs)
		}
	}
}
