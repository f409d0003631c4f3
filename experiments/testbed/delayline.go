package testbed

import (
	"container/heap"
	"context"
	"errors"
	"io"
	"math/rand"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// DelayLine is the tun shaper's core: it holds every IPv4 packet between
// two peers for the pair's one-way delay (Plan.OneWay, with the plan's
// jitter and loss), drops packets across a partition, and passes anything
// else (a packet from or to an address that is no peer's) at once. Packets
// of one pair leave in the order they came, jitter or not.
//
// Admit and PopDue are the pure decisions, on a clock the caller gives;
// Run is the loop that feeds them from a TUN device.
type DelayLine struct {
	p *Plan

	mu   sync.Mutex
	rng  *rand.Rand
	side []int                // partition sides (0: none); nil: no partition
	last map[uint64]time.Time // per pair (src, dst): the last due time
	q    packetHeap
	seq  uint64
	wake chan struct{}

	stats DelayStats
	late  []float64 // lateness of the latest written packets, ms (a ring)
	lateN int
}

// DelayStats counts what a delay line did.
type DelayStats struct {
	Packets uint64 `json:"packets"`
	// Passed were no peer-to-peer packet (passed at once); Delayed were
	// held for their pair's delay and written back.
	Passed  uint64 `json:"passed"`
	Delayed uint64 `json:"delayed"`
	// DroppedPartition were between two sides of a partition;
	// DroppedLoss, dropped by the loss rate; NotIPv4, not IPv4 (dropped).
	DroppedPartition uint64 `json:"dropped_partition"`
	DroppedLoss      uint64 `json:"dropped_loss"`
	NotIPv4          uint64 `json:"not_ipv4"`
	WriteErrors      uint64 `json:"write_errors"`
	// LateMs is how late packets left against their due time (the
	// machine's own delay added to the matrix's), median, p99 and max over
	// the latest 65 536 written.
	LateMs [3]float64 `json:"late_ms"`
}

const lateRing = 1 << 16

// NewDelayLine makes a delay line for the plan; seed draws jitter and loss.
func NewDelayLine(p *Plan, seed int64) *DelayLine {
	return &DelayLine{p: p, rng: rand.New(rand.NewSource(seed)), last: map[uint64]time.Time{}, wake: make(chan struct{}, 1)}
}

// SetSides partitions the peers: packets between peers on different
// non-zero sides are dropped from now on. nil heals.
func (d *DelayLine) SetSides(side []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.side = append([]int(nil), side...)
	if side == nil {
		d.side = nil
	}
}

// ipv4Pair reads an IPv4 packet's source and destination.
func ipv4Pair(pkt []byte) (src, dst netip.Addr, ok bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return src, dst, false
	}
	src = netip.AddrFrom4([4]byte(pkt[12:16]))
	dst = netip.AddrFrom4([4]byte(pkt[16:20]))
	return src, dst, true
}

// Admit decides a packet that arrived at now: when it is due, or false to
// drop it.
func (d *DelayLine) Admit(now time.Time, pkt []byte) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.Packets++
	src, dst, ok := ipv4Pair(pkt)
	if !ok {
		d.stats.NotIPv4++
		return time.Time{}, false
	}
	i, j := d.p.Index(src), d.p.Index(dst)
	if i < 0 || j < 0 {
		d.stats.Passed++
		return now, true
	}
	if d.side != nil && d.side[i] != 0 && d.side[j] != 0 && d.side[i] != d.side[j] {
		d.stats.DroppedPartition++
		return time.Time{}, false
	}
	if d.p.Loss > 0 && d.rng.Float64() < d.p.Loss {
		d.stats.DroppedLoss++
		return time.Time{}, false
	}
	delay := d.p.OneWay(i, j)
	if d.p.Jitter > 0 {
		delay += time.Duration((2*d.rng.Float64() - 1) * float64(d.p.Jitter))
		delay = max(delay, 0)
	}
	due := now.Add(delay)
	key := uint64(i)<<32 | uint64(j)
	if l, ok := d.last[key]; ok && due.Before(l) {
		due = l
	}
	d.last[key] = due
	d.stats.Delayed++
	return due, true
}

// Push queues a packet until due.
func (d *DelayLine) Push(due time.Time, pkt []byte) {
	d.mu.Lock()
	d.seq++
	heap.Push(&d.q, item{due: due, seq: d.seq, pkt: pkt})
	first := d.q[0].seq == d.seq
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// PopDue takes the packets due by now, in due order, and says when the
// next one is due (ok false: none queued).
func (d *DelayLine) PopDue(now time.Time) (pkts []item, next time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.q) > 0 && !d.q[0].due.After(now) {
		pkts = append(pkts, heap.Pop(&d.q).(item))
	}
	if len(d.q) > 0 {
		return pkts, d.q[0].due, true
	}
	return pkts, time.Time{}, false
}

// Queued is how many packets wait.
func (d *DelayLine) Queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.q)
}

func (d *DelayLine) written(late time.Duration, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.stats.WriteErrors++
		return
	}
	ms := float64(late) / float64(time.Millisecond)
	if len(d.late) < lateRing {
		d.late = append(d.late, ms)
	} else {
		d.late[d.lateN%lateRing] = ms
	}
	d.lateN++
	d.stats.LateMs[2] = max(d.stats.LateMs[2], ms)
}

// Stats is what the delay line did so far.
func (d *DelayLine) Stats() DelayStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stats
	if len(d.late) > 0 {
		s := append([]float64(nil), d.late...)
		sort.Float64s(s)
		st.LateMs[0] = s[len(s)/2]
		st.LateMs[1] = s[min(len(s)-1, len(s)*99/100)]
	}
	return st
}

// Run moves packets until ctx ends or the device fails: every packet read
// from dev is admitted and written back to dev when due. A packet is read
// into a buffer of its own (65 535 bytes covers any IPv4 packet).
func (d *DelayLine) Run(ctx context.Context, dev io.ReadWriter) error {
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 65535)
		for {
			n, err := dev.Read(buf)
			if err != nil {
				errc <- err
				return
			}
			now := time.Now()
			due, ok := d.Admit(now, buf[:n])
			if !ok {
				continue
			}
			d.Push(due, append([]byte(nil), buf[:n]...))
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		pkts, next, ok := d.PopDue(now)
		for _, it := range pkts {
			_, err := dev.Write(it.pkt)
			d.written(time.Since(it.due), err)
		}
		var tc <-chan time.Time
		if ok {
			timer.Reset(time.Until(next))
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-d.wake:
		case <-tc:
		}
		if ok && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

type item struct {
	due time.Time
	seq uint64
	pkt []byte
}

// packetHeap orders packets by due time, then by arrival.
type packetHeap []item

func (h packetHeap) Len() int { return len(h) }
func (h packetHeap) Less(a, b int) bool {
	if !h[a].due.Equal(h[b].due) {
		return h[a].due.Before(h[b].due)
	}
	return h[a].seq < h[b].seq
}
func (h packetHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *packetHeap) Push(x any)   { *h = append(*h, x.(item)) }
func (h *packetHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = item{}
	*h = old[:len(old)-1]
	return x
}
