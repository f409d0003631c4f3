package testbed

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// inNetns runs f on an OS thread inside namespace ns; sockets f makes stay
// in ns. The thread is never given back to the runtime.
func inNetns(ns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- err
			return
		}
		defer h.Close()
		if err := unix.Setns(int(h.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		ch <- f()
	}()
	return <-ch
}

// connectTime is how long a TCP connect from namespace a to addr takes: one
// round trip.
func connectTime(ns string, addr string) (time.Duration, error) {
	var d time.Duration
	err := inNetns(ns, func() error {
		t0 := time.Now()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		d = time.Since(t0)
		return c.Close()
	})
	return d, err
}

// TestBed_Live makes a three-namespace bed with the shaper this kernel has
// and checks a TCP connect between two peers takes their RTT, that a
// partition stops it and a heal brings it back, and that nothing is left.
func TestBed_Live(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the live bed runs in its own CI step")
	}
	if err := Available(); err != nil {
		t.Skipf("no test bed here: %v", err)
	}
	rtt := latency.NewMatrix("test", 3, func(i, j int) float64 {
		if i == j {
			return 0
		}
		return float64(40 * (i + j)) // 0-1: 40 ms, 0-2: 80 ms, 1-2: 120 ms
	})
	id := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	shaper := TUN
	if ProbeNetem(id) {
		shaper = Netem
	}
	p, err := NewPlan(Config{N: 3, RunID: id, Octet: 250, RTT: rtt, Shaper: shaper})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Up(context.Background(), p, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Down(); err != nil {
			t.Error(err)
		}
		nss, links, err := Leftovers(Prefix + id)
		if err != nil || len(nss)+len(links) > 0 {
			t.Errorf("left behind: %v %v %v", nss, links, err)
		}
	}()
	// A listener in namespace 1 and 2.
	for _, i := range []int{1, 2} {
		addr := net.JoinHostPort(p.Addr(i).String(), "7000")
		err := inNetns(p.Namespace(i), func() error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{1, 2} {
		want := time.Duration(rtt.RTT(0, i) * float64(time.Millisecond))
		best := time.Hour
		for k := 0; k < 3; k++ {
			d, err := connectTime(p.Namespace(0), net.JoinHostPort(p.Addr(i).String(), "7000"))
			if err != nil {
				t.Fatalf("connect 0 → %d: %v", i, err)
			}
			best = min(best, d)
		}
		t.Logf("connect 0 → %d: %v (RTT %v, %s)", i, best, want, shaper)
		if best < want || best > want+30*time.Millisecond {
			t.Errorf("connect 0 → %d took %v, want the RTT %v (+ up to 30 ms)", i, best, want)
		}
	}
	if err := b.Partition([]int{1, 2, 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(p.Namespace(0), net.JoinHostPort(p.Addr(1).String(), "7000")); err == nil {
		t.Error("connect across the partition worked")
	}
	if _, err := connectTime(p.Namespace(0), net.JoinHostPort(p.Addr(2).String(), "7000")); err != nil {
		t.Errorf("connect within a side failed: %v", err)
	}
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(p.Namespace(0), net.JoinHostPort(p.Addr(1).String(), "7000")); err != nil {
		t.Errorf("connect after healing: %v", err)
	}
	// The status reader's way: the root namespace reaches every peer.
	ln, err := func() (net.Listener, error) {
		var ln net.Listener
		err := inNetns(p.Namespace(2), func() (err error) {
			ln, err = net.Listen("tcp", net.JoinHostPort(p.Addr(2).String(), "7001"))
			return err
		})
		return ln, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(p.Addr(2).String(), "7001"), 5*time.Second)
	if err != nil {
		t.Fatalf("root namespace → peer: %v", err)
	}
	c.Close()
	if b.Delay != nil {
		t.Logf("delay line: %+v", b.Delay.Stats())
	}
}
