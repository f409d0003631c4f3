package testbed

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// packet is a minimal IPv4 header from a to b with a marker byte.
func packet(a, b netip.Addr, mark byte) []byte {
	pkt := make([]byte, 21)
	pkt[0] = 0x45
	copy(pkt[12:16], a.AsSlice())
	copy(pkt[16:20], b.AsSlice())
	pkt[20] = mark
	return pkt
}

func TestDelayLine_Admit(t *testing.T) {
	p := plan(t, 4, TUN)
	d := NewDelayLine(p, 1)
	now := time.Unix(1000, 0)
	due, ok := d.Admit(now, packet(p.Addr(1), p.Addr(3), 0))
	if !ok || due.Sub(now) != p.OneWay(1, 3) {
		t.Errorf("1 → 3 due after %v, want %v", due.Sub(now), p.OneWay(1, 3))
	}
	// The status reader and the router are no peers: passed at once.
	if due, ok := d.Admit(now, packet(p.BridgeAddr(), p.Addr(2), 0)); !ok || !due.Equal(now) {
		t.Errorf("bridge → 2: %v %v", due.Sub(now), ok)
	}
	if _, ok := d.Admit(now, []byte{0x60, 0, 0}); ok {
		t.Error("a non-IPv4 packet was admitted")
	}
	d.SetSides([]int{1, 2, 1, 0})
	if _, ok := d.Admit(now, packet(p.Addr(0), p.Addr(1), 0)); ok {
		t.Error("a packet crossed the partition")
	}
	for _, pair := range [][2]int{{0, 2}, {3, 1}, {1, 3}} {
		if _, ok := d.Admit(now, packet(p.Addr(pair[0]), p.Addr(pair[1]), 0)); !ok {
			t.Errorf("%v dropped: same side, or a peer on no side", pair)
		}
	}
	d.SetSides(nil)
	if _, ok := d.Admit(now, packet(p.Addr(0), p.Addr(1), 0)); !ok {
		t.Error("dropped after the heal")
	}
	st := d.Stats()
	if st.DroppedPartition != 1 || st.NotIPv4 != 1 || st.Passed != 1 || st.Packets != 8 {
		t.Errorf("stats %+v", st)
	}
}

func TestDelayLine_JitterKeepsOrderAndLossDrops(t *testing.T) {
	p, err := NewPlan(Config{N: 2, RunID: "0a1f", Octet: 213, RTT: rttOf(2), Shaper: TUN, Jitter: 5 * time.Millisecond, Loss: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDelayLine(p, 7)
	now := time.Unix(1000, 0)
	var last time.Time
	admitted := 0
	const total = 4000
	for k := 0; k < total; k++ {
		at := now.Add(time.Duration(k) * 100 * time.Microsecond)
		due, ok := d.Admit(at, packet(p.Addr(0), p.Addr(1), 0))
		if !ok {
			continue
		}
		admitted++
		if due.Before(last) {
			t.Fatalf("packet %d due before the one ahead of it", k)
		}
		if lo, hi := at.Add(p.OneWay(0, 1)-p.Jitter), at.Add(p.OneWay(0, 1)+p.Jitter); due.Before(lo) || (due.After(hi) && due.After(last)) {
			t.Fatalf("packet %d due %v after it came, want %v ± %v", k, due.Sub(at), p.OneWay(0, 1), p.Jitter)
		}
		last = due
	}
	if lost := float64(total-admitted) / total; lost < 0.22 || lost > 0.28 {
		t.Errorf("lost %.3f, want about 0.25", lost)
	}
}

func TestDelayLine_PopDueInOrder(t *testing.T) {
	p := plan(t, 2, TUN)
	d := NewDelayLine(p, 1)
	t0 := time.Unix(1000, 0)
	for k, off := range []int{30, 10, 20, 10} {
		d.Push(t0.Add(time.Duration(off)*time.Millisecond), []byte{byte(k)})
	}
	got, next, ok := d.PopDue(t0.Add(15 * time.Millisecond))
	if len(got) != 2 || got[0].pkt[0] != 1 || got[1].pkt[0] != 3 || !ok || !next.Equal(t0.Add(20*time.Millisecond)) {
		t.Fatalf("first pop: %v, next %v %v", got, next.Sub(t0), ok)
	}
	got, _, ok = d.PopDue(t0.Add(time.Second))
	if len(got) != 2 || got[0].pkt[0] != 2 || got[1].pkt[0] != 0 || ok || d.Queued() != 0 {
		t.Fatalf("second pop: %v %v", got, ok)
	}
}

// fakeTUN is a device whose reads come from a channel and whose writes are
// recorded with their time.
type fakeTUN struct {
	in  chan []byte
	mu  sync.Mutex
	out []sent
}

type sent struct {
	at  time.Time
	pkt []byte
}

func (f *fakeTUN) Read(b []byte) (int, error) {
	pkt, ok := <-f.in
	if !ok {
		return 0, io.EOF
	}
	return copy(b, pkt), nil
}

func (f *fakeTUN) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, sent{time.Now(), append([]byte(nil), b...)})
	return len(b), nil
}

func TestDelayLine_Run(t *testing.T) {
	p := plan(t, 4, TUN) // 0 → 1: 5.25 ms, 0 → 3: 15.25 ms
	d := NewDelayLine(p, 1)
	dev := &fakeTUN{in: make(chan []byte)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, dev) }()
	// The reads are unbuffered: a send returns once the line has read
	// the packet: 3 is read in [t0, ta], 1 and 9 in [ta, tc].
	t0 := time.Now()
	dev.in <- packet(p.Addr(0), p.Addr(3), 3)
	ta := time.Now()
	dev.in <- packet(p.Addr(0), p.Addr(1), 1)
	dev.in <- packet(p.BridgeAddr(), p.Addr(1), 9)
	tc := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	for {
		dev.mu.Lock()
		n := len(dev.out)
		dev.mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	close(dev.in)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if len(dev.out) != 3 {
		t.Fatalf("%d packets written, want 3", len(dev.out))
	}
	at := map[byte]int{}
	for k, o := range dev.out {
		at[o.pkt[20]] = k
	}
	// Each order is owed only where the reads left it no choice (the line
	// stamps a packet when it has read it, before it reads the next): 1
	// is due before 3 if read within their delays' difference of t0, and
	// 9, passed at once, goes before 1 if read well before 1 was due (half
	// its delay left for the line's own scheduling). A loaded machine that
	// stalled between two sends may fairly reverse them.
	if tc.Sub(t0) < p.OneWay(0, 3)-p.OneWay(0, 1) && at[1] > at[3] {
		t.Errorf("packet 1 (5 ms) written after packet 3 (15 ms), both read within %v", tc.Sub(t0))
	}
	if tc.Sub(ta) < p.OneWay(0, 1)/2 && at[9] > at[1] {
		t.Errorf("packet 9 (passed) written after packet 1 (5 ms), read %v after it", tc.Sub(ta))
	}
	if held := dev.out[at[1]].at.Sub(ta); held < p.OneWay(0, 1) {
		t.Errorf("0 → 1 held %v, want at least %v", held, p.OneWay(0, 1))
	}
	if held := dev.out[2].at.Sub(t0); held < p.OneWay(0, 3) {
		t.Errorf("0 → 3 held %v, want at least %v", held, p.OneWay(0, 3))
	}
}
