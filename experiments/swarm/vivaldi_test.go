package swarm

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestVivaldi_SwarmLive: 60 peers of the swarm run the real coordinate
// protocol over PlanetLab latencies until the live median relative error is
// under 0.25.
func TestVivaldi_SwarmLive(t *testing.T) {
	s, _ := planetlabSwarm(t, 60, 5)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sum, err := v.Wait(ctx, VivaldiWait{Bound: 0.25, Patience: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("median %.3f p90 %.3f after %.1f s, %.0f samples per peer", sum.Median, sum.P90, sum.Seconds, sum.Samples)
	for i := range s.Peers {
		if c := v.Coord(i); c.Check() != nil {
			t.Errorf("peer %d: invalid coordinate %+v", i, c)
		}
	}
	// Between honest peers nothing is malformed; the coordinate defence
	// may refuse an honest sample where the measured latencies break the
	// triangle inequality (real Internet RTTs do), but rarely.
	implausible := uint64(0)
	for i := range s.Peers {
		d := v.Service(i).Drops()
		implausible += d["implausible"]
		delete(d, "implausible")
		if len(d) > 0 {
			t.Errorf("peer %d dropped frames between honest peers: %v", i, d)
		}
	}
	if limit := 0.05 * sum.Samples * float64(len(s.Peers)); float64(implausible) > limit {
		t.Errorf("%d honest samples refused as implausible, more than 5%% of %.0f", implausible, sum.Samples*float64(len(s.Peers)))
	}
}

// TestVivaldiRun_RTTExcessIsSmallOnAnIdleSwarm: every sample is checked
// against the matrix; on a small swarm the machine adds about a
// millisecond, so the median excess is small and never negative by more
// than rounding (a sample cannot beat the link's latency).
func TestVivaldiRun_RTTExcessIsSmallOnAnIdleSwarm(t *testing.T) {
	s, _ := planetlabSwarm(t, 30, 4)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !pollUntil(ctx, func() bool { _, _, n := v.RTTExcess(); return n >= 200 }) {
		t.Fatal("fewer than 200 samples in a minute")
	}
	med, p90, n := v.RTTExcess()
	if med < -0.05 || med > 5 || p90 < med {
		t.Errorf("sample excess over the matrix RTT: median %.2f ms, p90 %.2f ms over %d samples; want a small positive median", med, p90, n)
	}
	v.excess.mu.Lock()
	least := slices.Min(v.excess.ms)
	v.excess.mu.Unlock()
	if least < -0.05 {
		t.Errorf("a sample measured %.2f ms less than its link's RTT", -least)
	}
	t.Logf("excess median %.2f ms, p90 %.2f ms over %d samples", med, p90, n)
}

// TestSwarm_Dilate: after Dilate(3) every link, those made before and
// after, carries three times the matrix's latency; the Vivaldi services
// divide what they measure by 3, so their samples match the matrix (an
// undivided sample would be 2 × RTT over it); Elapsed runs a third as fast
// as the clock; a factor below 1 is refused.
func TestSwarm_Dilate(t *testing.T) {
	s, _ := planetlabSwarm(t, 20, 6)
	if err := s.Dilate(0.5); err == nil {
		t.Fatal("dilation 0.5 accepted")
	}
	before := s.Links()
	if err := s.Dilate(3); err != nil {
		t.Fatal(err)
	}
	dilatedAt := time.Now()
	checkLinks := func() int {
		t.Helper()
		n := 0
		for i := range s.Peers {
			for j := i + 1; j < len(s.Peers); j++ {
				for _, l := range s.mn.LinksBetweenPeers(s.Peers[i].Host.ID(), s.Peers[j].Host.ID()) {
					want := time.Duration(s.RTT(i, j) / 2 * 3 * float64(time.Millisecond))
					if got := l.Options().Latency; got != want {
						t.Fatalf("link %d–%d: latency %v, want %v", i, j, got, want)
					}
					n++
				}
			}
		}
		return n
	}
	if checkLinks() == 0 || before == 0 {
		t.Fatal("no links to check")
	}
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 50 * time.Millisecond, Random: 19})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !pollUntil(ctx, func() bool { _, _, n := v.RTTExcess(); return n >= 100 }) {
		t.Fatal("fewer than 100 samples in a minute")
	}
	med, p90, n := v.RTTExcess()
	if med < -0.05 || med > 5 {
		t.Errorf("dilated samples %.2f ms (p90 %.2f, %d samples) over the matrix RTT; want about 0", med, p90, n)
	}
	// A link made after dilating: peers 0 and 1 unlinked and linked again.
	a, b := s.Peers[0].Host.ID(), s.Peers[1].Host.ID()
	if err := s.mn.UnlinkPeers(a, b); err != nil {
		t.Fatal(err)
	}
	s.link.linked.Delete([2]int{0, 1})
	if err := s.link.ensure(a, b); err != nil {
		t.Fatal(err)
	}
	if len(s.mn.LinksBetweenPeers(a, b)) == 0 {
		t.Fatal("peers 0 and 1 not linked again")
	}
	checkLinks()
	wall := time.Since(dilatedAt)
	if e := s.Elapsed(dilatedAt); e < wall/3 || e > wall/3+50*time.Millisecond {
		t.Errorf("Elapsed of %v on the clock since dilating: %v, want a third", wall, e)
	}
}

// TestSwarm_DilateWhileRunning: coordinates warmed up undilated, then the
// swarm dilated by 3 while the services run — the way peer swarm warms up
// at one factor and selects at another. The services follow: their samples
// after the change match the matrix (not 2 × RTT over it), the links carry
// three times the latency, and Elapsed counts the time before the change
// at 1 and after it at a third.
func TestSwarm_DilateWhileRunning(t *testing.T) {
	s, _ := planetlabSwarm(t, 20, 6)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 50 * time.Millisecond, Random: 19})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !pollUntil(ctx, func() bool { _, _, n := v.RTTExcess(); return n >= 100 }) {
		t.Fatal("fewer than 100 undilated samples in a minute")
	}
	calling := time.Now()
	if err := s.Dilate(3); err != nil {
		t.Fatal(err)
	}
	dilatedAt := time.Now()
	v.excess.mu.Lock()
	v.excess.ms, v.excess.next = nil, 0
	v.excess.mu.Unlock()
	if !pollUntil(ctx, func() bool { _, _, n := v.RTTExcess(); return n >= 100 }) {
		t.Fatal("fewer than 100 dilated samples in a minute")
	}
	// A sample in flight across the change may have slipped into the
	// ring: the median and 90th percentile must still be the matrix.
	med, p90, n := v.RTTExcess()
	if med < -0.05 || med > 5 || p90 > 10 {
		t.Errorf("samples after dilating %.2f ms (p90 %.2f, %d samples) over the matrix RTT; want about 0", med, p90, n)
	}
	for i := range s.Peers {
		for j := i + 1; j < len(s.Peers); j++ {
			for _, l := range s.mn.LinksBetweenPeers(s.Peers[i].Host.ID(), s.Peers[j].Host.ID()) {
				if want := time.Duration(s.RTT(i, j) / 2 * 3 * float64(time.Millisecond)); l.Options().Latency != want {
					t.Fatalf("link %d–%d: latency %v, want %v", i, j, l.Options().Latency, want)
				}
			}
		}
	}
	// The change took effect somewhere between calling Dilate and its
	// return.
	t1 := time.Now()
	e := s.Elapsed(started)
	t2 := time.Now()
	least := calling.Sub(started) + t1.Sub(calling)/3
	most := dilatedAt.Sub(started) + t2.Sub(dilatedAt)/3
	if e < least || e > most {
		t.Errorf("Elapsed %v across the change (%v undilated, then at 3), want within [%v, %v]", e, calling.Sub(started), least, most)
	}
}

// A wait that cannot reach its bound ends on a plateau, and not before
// every peer has sampled PatienceSamples times since the error last fell:
// the plateau is counted in samples, which a large swarm takes slowly,
// not only in polls.
func TestVivaldiRun_PlateauCountsSamples(t *testing.T) {
	s, _ := planetlabSwarm(t, 20, 6)
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quick, err := v.Wait(ctx, VivaldiWait{Bound: 1e-6, Poll: 100 * time.Millisecond, Patience: 2, MinImprove: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	from := v.Samples()
	patient, err := v.Wait(ctx, VivaldiWait{Bound: 1e-6, Poll: 100 * time.Millisecond, Patience: 2, MinImprove: 0.5, PatienceSamples: 12})
	if err != nil {
		t.Fatal(err)
	}
	if quick.Stopped != "plateau" || patient.Stopped != "plateau" {
		t.Fatalf("stopped by %q and %q", quick.Stopped, patient.Stopped)
	}
	// Two polls of 100 ms are under one sample a peer; twelve samples
	// since the last improvement take at least 12 × 300 ms × ½ (jitter).
	if patient.Samples-from < 12 {
		t.Errorf("the patient wait ended after %.1f samples a peer, want at least 12", patient.Samples-from)
	}
	t.Logf("plateau after %.1f samples a peer (polls alone) and %.1f more (12 samples of patience)", quick.Samples, patient.Samples-from)
}

// TestVivaldiRun_StallDiscardsTheMachinesSamples: with Stall set, samples
// timed across a stall of the process are discarded and counted, the rest
// used; without it nothing is counted. The stalls are made: every P busy
// for 40 ms at a time while the peers sample.
func TestVivaldiRun_StallDiscardsTheMachinesSamples(t *testing.T) {
	s, _ := planetlabSwarm(t, 20, 6)
	if _, err := s.StartVivaldi(VivaldiOptions{Stall: -time.Millisecond}); err == nil {
		t.Fatal("a negative Stall was accepted")
	}
	v, err := s.StartVivaldi(VivaldiOptions{Interval: 50 * time.Millisecond, Stall: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hog := func() {
		var wg sync.WaitGroup
		start := time.Now()
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for x := 0; time.Since(start) < 40*time.Millisecond; x++ {
				}
			}()
		}
		wg.Wait()
	}
	if !pollUntil(ctx, func() bool {
		hog()
		st := v.Stalls()
		return st.Discarded >= 5 && st.Samples >= st.Discarded+50
	}) {
		t.Fatalf("stalls never discarded 5 samples beside 50 used: %+v", v.Stalls())
	}
	st := v.Stalls()
	if st.ThresholdMs != 2 || st.Late == 0 || st.Ticks == 0 {
		t.Errorf("stalls %+v: want the 2 ms threshold, late wake-ups seen", st)
	}
	used := uint64(0)
	for i := range s.Peers {
		used += v.Service(i).Stats().Samples
	}
	if used+st.Discarded != st.Samples {
		t.Errorf("%d used + %d discarded != %d samples", used, st.Discarded, st.Samples)
	}
	// The discarded samples are the ones the hogs delayed.
	if med, _, _ := v.RTTExcess(); st.DiscardedExcessMs[0] <= med {
		t.Errorf("discarded samples %.2f ms over the matrix (median), the used %.2f: want the discarded further off", st.DiscardedExcessMs[0], med)
	}
	v.Close()
	v2, err := s.StartVivaldi(VivaldiOptions{Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	if v2.Stalls() != nil {
		t.Error("Stalls reported with the check off")
	}
}
