package memlimit

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

const mib = 1 << 20

func TestLimit(t *testing.T) {
	cases := []struct {
		name   string
		target uint64
		r      Reading
		want   int64
	}{
		{"binary outside the runtime", 4000 * mib, Reading{RSS: 4080 * mib, Runtime: 4020 * mib}, 3940 * mib},
		{"runtime counts more than is resident", 100 * mib, Reading{RSS: 80 * mib, Runtime: 90 * mib}, 100 * mib},
		{"equal", 100 * mib, Reading{RSS: 90 * mib, Runtime: 90 * mib}, 100 * mib},
		{"outside larger than half the target", 100 * mib, Reading{RSS: 200 * mib, Runtime: 120 * mib}, 50 * mib},
		{"nothing read", 100 * mib, Reading{}, 100 * mib},
		{"huge target", 1<<64 - 1, Reading{RSS: 2, Runtime: 1}, 1<<63 - 1},
	}
	for _, c := range cases {
		if got := Limit(c.target, c.r); got != c.want {
			t.Errorf("%s: Limit(%d, %+v) = %d, want %d", c.name, c.target, c.r, got, c.want)
		}
	}
}

func TestRead(t *testing.T) {
	r := Read()
	if runtime.GOOS == "linux" && r.RSS == 0 {
		t.Fatal("no RSS read on linux")
	}
	if r.Runtime == 0 {
		t.Fatal("the runtime counts no memory")
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if r.Runtime > ms.Sys {
		t.Errorf("runtime count %d > Sys %d", r.Runtime, ms.Sys)
	}
}

var sink [][]byte

// TestHold_HoldsRSS allocates 16 times the target's worth of garbage with
// the collector's pacing off: only the memory limit the Holder set makes it
// collect, and RSS must end near the target, not near what was allocated.
func TestHold_HoldsRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.GC()
	debug.FreeOSMemory()
	before := debug.SetMemoryLimit(-1)
	target := Read().RSS + 64*mib
	h := Hold(target, 10*time.Millisecond)
	if l := debug.SetMemoryLimit(-1); l != h.Current() || l > int64(target) || l < int64(target/2) {
		t.Fatalf("limit %d, Current %d, target %d", l, h.Current(), target)
	}
	peak := uint64(0)
	for i := range 16 * 64 {
		sink = append(sink, make([]byte, mib))
		if len(sink) > 8 {
			sink = sink[1:]
		}
		if i%16 == 0 {
			peak = max(peak, RSS())
		}
	}
	sink = nil
	peak = max(peak, RSS())
	h.Stop()
	h.Stop()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("limit after Stop %d, want the one before, %d", got, before)
	}
	// The limit is soft: allow an eighth of the allocation over it.
	if peak > target+128*mib {
		t.Errorf("peak RSS %d MiB with a target of %d MiB (1 GiB allocated)", peak/mib, target/mib)
	}
	t.Logf("target %d MiB, peak RSS %d MiB", target/mib, peak/mib)
}
