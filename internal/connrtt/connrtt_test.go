package connrtt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

// pair connects two real hosts over listen (a loopback multiaddr with port
// 0), pings a few times so the transport has RTT samples, and returns the
// dialer's connection.
func pair(t testing.TB, listen string) network.Conn {
	t.Helper()
	a, err := libp2p.New(libp2p.ListenAddrStrings(listen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := libp2p.New(libp2p.ListenAddrStrings(listen))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.Addrs()}); err != nil {
		t.Fatal(err)
	}
	pingN(ctx, t, b, a.ID(), 3)
	conns := b.Network().ConnsToPeer(a.ID())
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	return conns[0]
}

func pingN(ctx context.Context, t testing.TB, h host.Host, p peer.ID, n int) {
	res := ping.Ping(ctx, h, p)
	for range n {
		if r := <-res; r.Error != nil {
			t.Fatal(r.Error)
		}
	}
}

// On loopback both transports report an RTT, and a small one.
func TestOf_Loopback(t *testing.T) {
	for _, listen := range []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1", "/ip6/::1/tcp/0"} {
		t.Run(listen, func(t *testing.T) {
			if strings.HasPrefix(listen, "/ip6") && !hasIPv6Loopback() {
				t.Skip("no ::1 here")
			}
			c := pair(t, listen)
			d, ok := Of(c)
			tcp := strings.Contains(listen, "/tcp/")
			if tcp && runtime.GOOS != "linux" {
				if ok {
					t.Fatalf("TCP RTT %v off Linux", d)
				}
				return
			}
			if !ok || d <= 0 || d > 50*time.Millisecond {
				t.Fatalf("RTT %v, %v over %s", d, ok, c.RemoteMultiaddr())
			}
		})
	}
}

func hasIPv6Loopback() bool {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip6/::1/tcp/0"))
	if err != nil {
		return false
	}
	h.Close()
	return true
}

// A connection of no transport it knows (closed, here) or an address that
// is not one TCP socket is no RTT.
func TestTCPAddr_OnlyPlainTCP(t *testing.T) {
	c := pair(t, "/ip4/127.0.0.1/tcp/0")
	if _, ok := tcpAddr(c.RemoteMultiaddr()); !ok {
		t.Fatalf("%s not read as TCP", c.RemoteMultiaddr())
	}
	for _, s := range []string{"/ip4/1.2.3.4/tcp/1/ws", "/ip4/1.2.3.4/udp/1/quic-v1", "/dns4/example.com/tcp/1"} {
		if _, ok := tcpAddr(mustAddr(t, s)); ok {
			t.Errorf("%s read as a TCP socket", s)
		}
	}
}

// While the process is too busy to answer at once (a CPU hog on every
// core), the kernel's TCP RTT stays the loopback's: what the application
// times is stretched by the wait to be scheduled, the transport's RTT not.
func TestOf_BusyProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's TCP RTT is read on Linux")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hog(ctx)
	c := pair(t, "/ip4/127.0.0.1/tcp/0")
	d, ok := Of(c)
	if !ok || d > 2*time.Millisecond {
		t.Fatalf("kernel RTT %v (%v) on a busy process's loopback connection", d, ok)
	}
	t.Logf("kernel RTT on loopback, process busy: %v", d)
}

// hog keeps every core busy until ctx ends.
func hog(ctx context.Context) {
	for range runtime.NumCPU() * 2 {
		go func() {
			for ctx.Err() == nil {
			}
		}()
	}
}

const helperEnv = "CONNRTT_HELPER"

// In a network namespace of its own whose loopback delays every packet by
// 20 ms (tc netem), the RTT the transports report is the network's, 40 ms
// — and stays so while the process is too busy to answer at once: the
// helper runs a CPU hog on every core beside the pings.
func TestOf_Netem(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs Linux and root (network namespaces)")
	}
	if _, err := exec.LookPath("tc"); err != nil {
		t.Skip("needs iproute2")
	}
	ns := fmt.Sprintf("sptest-connrtt-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	if out, err := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "20ms").CombinedOutput(); err != nil {
		if strings.Contains(string(out), "unknown") {
			t.Skip("this kernel has no sch_netem")
		}
		t.Fatalf("tc: %v: %s", err, out)
	}
	for _, listen := range []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"} {
		cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^TestHelper$", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"="+listen)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", listen, err, out)
		}
		var ms float64
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "RTT_MS="); ok {
				ms, _ = strconv.ParseFloat(v, 64)
			}
		}
		if ms < 39 || ms > 45 {
			t.Errorf("%s: RTT %.2f ms, want 40 (netem 20 ms each way): %s", listen, ms, out)
		}
		t.Logf("%s: %.2f ms", listen, ms)
	}
}

// TestHelper is TestOf_Netem's half inside the namespace.
func TestHelper(t *testing.T) {
	listen := os.Getenv(helperEnv)
	if listen == "" {
		t.Skip("run by TestOf_Netem")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hog(ctx)
	c := pair(t, listen)
	d, ok := Of(c)
	if !ok {
		t.Fatal("no RTT")
	}
	fmt.Printf("RTT_MS=%.3f\n", float64(d)/float64(time.Millisecond))
}

func mustAddr(t *testing.T, s string) ma.Multiaddr {
	t.Helper()
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
