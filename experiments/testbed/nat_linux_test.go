package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
)

// freeRunID is a run ID no namespace or link on the machine has, near
// seed (another bed may be running).
func freeRunID(t *testing.T, seed int) string {
	t.Helper()
	for k := 0; k < 100; k++ {
		id := fmt.Sprintf("%04x", (seed+k)&0xffff)
		nss, links, err := Leftovers(Prefix + id)
		if err != nil {
			t.Fatal(err)
		}
		if len(nss)+len(links) == 0 {
			return id
		}
	}
	t.Fatal("no free run ID")
	return ""
}

// freeOctet is a subnet octet no address or route on the machine uses.
func freeOctet(t *testing.T, prefer int) int {
	t.Helper()
	a, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		t.Fatal(err)
	}
	r, err := exec.Command("ip", "-4", "route").Output()
	if err != nil {
		t.Fatal(err)
	}
	o, err := PickOctet(UsedPrefixes(string(a)+"\n"+string(r)), prefer)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// listenIn listens on addr inside namespace ns and sends every connection's
// remote address to the returned channel (closing the connection after
// writing "ok").
func listenIn(t *testing.T, ns, addr string) (net.Listener, <-chan netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	if err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	from := make(chan netip.AddrPort, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case from <- c.RemoteAddr().(*net.TCPAddr).AddrPort():
			default:
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln, from
}

// next is the next remote address a listenIn listener saw (invalid if none
// within 5 s).
func next(from <-chan netip.AddrPort) netip.AddrPort {
	select {
	case a := <-from:
		return a
	case <-time.After(5 * time.Second):
		return netip.AddrPort{}
	}
}

// TestBed_NAT makes a bed of three with peer 2 behind a NAT and checks
// that it connects out, masqueraded as its router's address and delayed
// by its matrix RTT; that nothing reaches it from outside but its
// forwarded status port, which the root namespace reaches as it does
// every peer's; that a cut and a partition take it with its router; and
// that Down kills its process and leaves nothing behind.
func TestBed_NAT(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the live bed runs in its own CI step")
	}
	if err := Available(); err != nil {
		t.Skipf("no test bed here: %v", err)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft here")
	}
	rtt := latency.NewMatrix("test", 3, func(i, j int) float64 {
		if i == j {
			return 0
		}
		return float64(40 * (i + j)) // 0-1: 40 ms, 0-2: 80 ms, 1-2: 120 ms
	})
	id := freeRunID(t, os.Getpid()+0x5a5a)
	shaper := TUN
	if ProbeNetem(id) {
		shaper = Netem
	}
	p, err := NewPlan(Config{N: 3, RunID: id, Octet: freeOctet(t, 49), RTT: rtt, Shaper: shaper, NAT: []bool{false, false, true}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Up(context.Background(), p, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	// Every peer's namespace names the public peers (the NAT'd one's
	// inner namespace too), not the NAT'd one.
	for _, c := range []struct {
		in, name int
		want     string
	}{{2, 0, p.Addr(0).String()}, {0, 1, p.Addr(1).String()}, {1, 2, ""}} {
		out, _ := b.Exec(c.in, "getent", "hosts", p.HostName(c.name)).Output()
		if f := strings.Fields(string(out)); c.want == "" && len(f) > 0 || c.want != "" && (len(f) == 0 || f[0] != c.want) {
			t.Errorf("peer %d resolves %s to %q, want %q", c.in, p.HostName(c.name), out, c.want)
		}
	}
	down := false
	defer func() {
		if !down {
			if err := b.Down(); err != nil {
				t.Error(err)
			}
		}
	}()
	inner := p.InnerNamespace(2)
	if p.PeerNamespace(2) != inner || p.PeerNamespace(0) != p.Namespace(0) {
		t.Fatalf("PeerNamespace: %s, %s", p.PeerNamespace(2), p.PeerNamespace(0))
	}

	// Exec runs in the inner namespace, which has the private address.
	out, err := b.Exec(2, "ip", "-4", "-o", "addr", "show", "dev", InnerDev).CombinedOutput()
	if err != nil || !strings.Contains(string(out), NATInnerAddr.String()+"/24") {
		t.Errorf("Exec(2) ip addr: %v: %s", err, out)
	}

	// (1) Out through the NAT: masqueraded as Addr(2), delayed by RTT(0, 2).
	pub := net.JoinHostPort(p.Addr(0).String(), "7000")
	_, from0 := listenIn(t, p.Namespace(0), pub)
	want := time.Duration(rtt.RTT(0, 2) * float64(time.Millisecond))
	best := time.Hour
	for k := 0; k < 3; k++ {
		d, err := connectTime(inner, pub)
		if err != nil {
			t.Fatalf("connect NAT'd 2 → 0: %v", err)
		}
		best = min(best, d)
		if src := next(from0); src.Addr() != p.Addr(2) {
			t.Errorf("peer 0 sees the NAT'd peer's connection from %s, want its router's %s", src, p.Addr(2))
		}
	}
	t.Logf("connect NAT'd 2 → 0: %v (RTT %v, %s)", best, want, shaper)
	if best < want || best > want+30*time.Millisecond {
		t.Errorf("connect NAT'd 2 → 0 took %v, want the RTT %v (+ up to 30 ms)", best, want)
	}

	// UDP (QUIC's way) goes out masqueraded too, its reply comes back, and
	// an ICMP error (port unreachable) reaches the peer as related.
	var udp net.PacketConn
	if err := inNetns(p.Namespace(0), func() (err error) {
		udp, err = net.ListenPacket("udp", net.JoinHostPort(p.Addr(0).String(), "7000"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	udpFrom := make(chan netip.AddrPort, 1)
	go func() {
		buf := make([]byte, 64)
		n, from, err := udp.ReadFrom(buf)
		if err != nil {
			return
		}
		udpFrom <- from.(*net.UDPAddr).AddrPort()
		udp.WriteTo(buf[:n], from)
	}()
	for _, port := range []string{"7000", "7999"} {
		err := inNetns(inner, func() error {
			c, err := net.Dial("udp", net.JoinHostPort(p.Addr(0).String(), port))
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("hi")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			if err == nil && string(buf[:n]) != "hi" {
				err = fmt.Errorf("echo %q", buf[:n])
			}
			return err
		})
		switch {
		case port == "7000" && err != nil:
			t.Errorf("UDP NAT'd 2 → 0: %v", err)
		case port == "7000":
			if src := next(udpFrom); src.Addr() != p.Addr(2) {
				t.Errorf("peer 0 sees the NAT'd peer's UDP from %s, want %s", src, p.Addr(2))
			}
		case !errors.Is(err, syscall.ECONNREFUSED):
			t.Errorf("UDP NAT'd 2 → 0's closed port: %v, want the port unreachable as ECONNREFUSED", err)
		}
	}

	// (2) Nothing comes in unasked: neither at the router's address (the
	// NAT drops it: a time-out, not a reset) nor at the private one (no
	// route to it).
	_, from2 := listenIn(t, inner, net.JoinHostPort(NATInnerAddr.String(), "7000"))
	for _, addr := range []netip.Addr{p.Addr(2), NATInnerAddr} {
		err := inNetns(p.Namespace(0), func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr.String(), "7000"), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("peer 0 connected to the NAT'd peer's port 7000 at %s", addr)
		}
		var ne net.Error
		if addr == p.Addr(2) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("connect to %s:7000: %v, want a time-out (the NAT drops it)", addr, err)
		}
		t.Logf("peer 0 → %s:7000 (NAT'd peer 2): %v", addr, err)
	}
	select {
	case src := <-from2:
		t.Errorf("the NAT'd peer accepted a connection from %s", src)
	default:
	}

	// (3) The status port is forwarded: the root namespace reaches a
	// listener at NATInnerAddr:StatusPort at Addr(2):StatusPort, as the
	// status poller does, and the peer sees the bed's address.
	_, fromStatus := listenIn(t, inner, net.JoinHostPort(NATInnerAddr.String(), fmt.Sprint(StatusPort)))
	c, err := net.DialTimeout("tcp", b.StatusAddr(2), 5*time.Second)
	if err != nil {
		t.Fatalf("root namespace → NAT'd peer's status port %s: %v", b.StatusAddr(2), err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "ok" {
		t.Errorf("status port: read %q, %v", got, err)
	}
	if src := next(fromStatus); src.Addr() != p.BridgeAddr() {
		t.Errorf("status port connection from %s, want the bridge's %s", src, p.BridgeAddr())
	}

	// A cut and a partition take the NAT'd peer with its router.
	if err := b.Cut(2); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(inner, pub); err == nil {
		t.Error("a cut NAT'd peer connected out")
	}
	if err := b.Restore(2); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(inner, pub); err != nil {
		t.Errorf("connect NAT'd 2 → 0 after Restore: %v", err)
	}
	next(from0)
	if err := b.Partition([]int{1, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(inner, pub); err == nil {
		t.Error("the NAT'd peer connected across the partition")
	}
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(inner, pub); err != nil {
		t.Errorf("connect NAT'd 2 → 0 after Heal: %v", err)
	}
	if b.Delay != nil {
		t.Logf("delay line: %+v", b.Delay.Stats())
	}

	// (4) Down kills the NAT'd peer's process and leaves nothing of the
	// run: no namespace (inner ones included), no link.
	proc, err := b.Start(2, []string{"sleep", "600"}, nil, filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	in := func() (bool, string) { // `ip netns exec` enters, then execs
		pids, _ := exec.Command("ip", "netns", "pids", inner).Output()
		return strings.Contains(" "+strings.Join(strings.Fields(string(pids)), " ")+" ", fmt.Sprintf(" %d ", proc.Pid)), string(pids)
	}
	for t0 := time.Now(); time.Since(t0) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		if ok, _ := in(); ok {
			break
		}
	}
	if ok, pids := in(); !ok {
		t.Errorf("Start(2): pid %d not in %s (pids %q)", proc.Pid, inner, pids)
	}
	down = true
	if err := b.Down(); err != nil {
		t.Error(err)
	}
	select {
	case <-proc.Exited():
	case <-time.After(5 * time.Second):
		t.Error("the NAT'd peer's process outlived Down")
		proc.Kill()
	}
	nss, links, err := Leftovers(Prefix + id)
	if err != nil || len(nss)+len(links) > 0 {
		t.Errorf("left behind: %v %v %v", nss, links, err)
	}
	for i := 0; i < p.N; i++ {
		if _, err := os.Stat(filepath.Join(EtcNetns, p.PeerNamespace(i))); !os.IsNotExist(err) {
			t.Errorf("%s of peer %d left behind (%v)", EtcNetns, i, err)
		}
	}
}
