package stall

import (
	"math"
	"runtime/metrics"
)

// Runtime is the Go runtime's own account of what delayed this process's
// goroutines over a span (Since): the collector's share of the CPU and its
// stop-the-world pauses, and how long runnable goroutines waited for a CPU.
// A Watch says that the process stalled; Runtime says why.
type Runtime struct {
	// GCCycles is the collections completed; GCLimited whether the
	// collector's CPU limiter was engaged in one of them (the heap held
	// at its memory limit, the collector running without end).
	GCCycles  uint64 `json:"gc_cycles"`
	GCLimited bool   `json:"gc_limited"`
	// GCShare is the collector's share of the process's CPU time
	// (marking, assists by allocating goroutines, pauses); AssistShare the
	// assists' alone, which delay the goroutine that allocates.
	GCShare     float64 `json:"gc_cpu_share"`
	AssistShare float64 `json:"gc_assist_share"`
	// PauseMs is the stop-the-world pauses (collector and other),
	// p99 and max, ms on the clock. Like SchedMs, each figure is the upper
	// bound of the runtime histogram's bucket it falls in (buckets up to a
	// quarter wide at these lengths: a max of 10 737 ms was between 8 590
	// and 10 737).
	PauseMs [2]float64 `json:"pause_ms"`
	// SchedMs is how long goroutines waited runnable before they ran:
	// median, p99, p99.9 and max, ms on the clock.
	SchedMs [4]float64 `json:"sched_latency_ms"`
}

// RuntimeReading is one read of the runtime's cumulative counters.
type RuntimeReading struct {
	cycles, limiter       uint64
	gcCPU, assist, allCPU float64
	pauses, sched         *metrics.Float64Histogram
}

var runtimeNames = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/limiter/last-enabled:gc-cycle",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/pauses/total/other:seconds",
	"/sched/latencies:seconds",
}

// ReadRuntime reads the runtime's counters now.
func ReadRuntime() RuntimeReading {
	s := make([]metrics.Sample, len(runtimeNames))
	for i, n := range runtimeNames {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	f := func(i int) float64 {
		if s[i].Value.Kind() == metrics.KindFloat64 {
			return s[i].Value.Float64()
		}
		return 0
	}
	h := func(i int) *metrics.Float64Histogram {
		if s[i].Value.Kind() == metrics.KindFloat64Histogram {
			return s[i].Value.Float64Histogram()
		}
		return nil
	}
	return RuntimeReading{
		cycles: u(0), limiter: u(1), gcCPU: f(2), assist: f(3), allCPU: f(4),
		pauses: addHist(h(5), h(6)), sched: h(7),
	}
}

// Since is what the runtime did between earlier and r.
func (r RuntimeReading) Since(earlier RuntimeReading) Runtime {
	var out Runtime
	out.GCCycles = r.cycles - min(earlier.cycles, r.cycles)
	out.GCLimited = r.limiter > 0 && r.limiter > earlier.cycles
	if cpu := r.allCPU - earlier.allCPU; cpu > 0 {
		out.GCShare = (r.gcCPU - earlier.gcCPU) / cpu
		out.AssistShare = (r.assist - earlier.assist) / cpu
	}
	p := subHist(r.pauses, earlier.pauses)
	out.PauseMs = [2]float64{1000 * quantile(p, 0.99), 1000 * quantile(p, 1)}
	sc := subHist(r.sched, earlier.sched)
	out.SchedMs = [4]float64{1000 * quantile(sc, 0.5), 1000 * quantile(sc, 0.99), 1000 * quantile(sc, 0.999), 1000 * quantile(sc, 1)}
	return out
}

// addHist is a + b bucket by bucket (the same buckets); either may be nil.
func addHist(a, b *metrics.Float64Histogram) *metrics.Float64Histogram {
	switch {
	case a == nil:
		return b
	case b == nil || len(a.Counts) != len(b.Counts):
		return a
	}
	out := &metrics.Float64Histogram{Buckets: a.Buckets, Counts: make([]uint64, len(a.Counts))}
	for i := range a.Counts {
		out.Counts[i] = a.Counts[i] + b.Counts[i]
	}
	return out
}

// subHist is a − b bucket by bucket: what a cumulative histogram gained
// since b (b nil or of other buckets: a as it is).
func subHist(a, b *metrics.Float64Histogram) *metrics.Float64Histogram {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return a
	}
	out := &metrics.Float64Histogram{Buckets: a.Buckets, Counts: make([]uint64, len(a.Counts))}
	for i := range a.Counts {
		out.Counts[i] = a.Counts[i] - min(b.Counts[i], a.Counts[i])
	}
	return out
}

// quantile is the q-th quantile (0 < q ≤ 1) of h, as the upper bound of
// the bucket it falls in (its lower bound for the last, unbounded bucket):
// the runtime's histograms are of bounded buckets, so this errs high by at
// most a bucket. 0 for an empty or nil histogram.
func quantile(h *metrics.Float64Histogram, q float64) float64 {
	if h == nil {
		return 0
	}
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				return h.Buckets[i]
			}
			return hi
		}
	}
	return 0
}
