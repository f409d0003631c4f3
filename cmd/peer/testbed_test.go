//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/testbed"
	"github.com/superpeer-overlay/superpeer/relay"
)

// testbedChild makes this test binary act as the peer command when the
// bed starts it in a namespace (and as `peer testbed` for the interrupt
// test).
const testbedChild = "PEER_TESTBED_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(testbedChild) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestTestbed_StatusShape: what `peer run` serves as /status decodes into
// what the bed reads.
func TestTestbed_StatusShape(t *testing.T) {
	known := 3
	in := status{ID: "12D3KooWA", Role: "client", Superpeer: "12D3KooWB", Clients: []string{"12D3KooWC"}, Key: "ab",
		RoutingTable: []string{"12D3KooWB"}, NetworkSize: 7,
		Coord: &coordReport{Vec: []float64{0.01, 0.02}, Height: 0.001, Error: 0.2},
		Token: &tokenStatus{ID: 2, Epoch: 5, Settled: true, Surveyed: true}, KnownTokens: &known,
		Addrs: []string{"/dns4/p1.example/tcp/4001/p2p/12D3KooWB/p2p-circuit"},
		Relay: &relayStatus{Mode: "superpeer", Held: []string{"12D3KooWB"}, Serving: &relay.ServiceStats{Running: true, Capacity: 9, Reservations: 4}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out testbed.Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Role != in.Role || out.Superpeer != in.Superpeer || len(out.Clients) != 1 || out.Key != in.Key ||
		len(out.RoutingTable) != 1 || out.NetworkSize != 7 || out.Coord == nil || out.Coord.Vec[1] != 0.02 || out.Coord.Height != 0.001 ||
		out.Token == nil || out.Token.ID != 2 || out.Token.Epoch != 5 || !out.Token.Settled || !out.Token.Surveyed || out.KnownTokens == nil || *out.KnownTokens != 3 ||
		len(out.Addrs) != 1 || out.Relay == nil || out.Relay.Mode != "superpeer" || len(out.Relay.Held) != 1 || out.Relay.Serving == nil ||
		!out.Relay.Serving.Running || out.Relay.Serving.Capacity != 9 || out.Relay.Serving.Reservations != 4 {
		t.Errorf("decoded %+v from %s", out, b)
	}
}

func TestTestbed_Usage(t *testing.T) {
	for _, args := range [][]string{
		{"--method", "nope"}, {"--n", "1"}, {"--superpeers", "0"}, {"--kill", "1"}, {"--shaper", "fq"},
		{"--loss", "1"}, {"--cut", "-1s"}, {"--start-rate", "0"}, {"--peer-nice", "20"}, {"--peer-nice", "-1"}, {"--method", "repel", "--ttl", "9s"}, {"--transport", "udp"}, {"--rtt", "kernel"}, {"stray"},
	} {
		var out, errb bytes.Buffer
		if err := runTestbed(args, &out, &errb); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// liveBed skips unless a bed can be made here.
func liveBed(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the live test bed runs in its own CI step")
	}
	if err := testbed.Available(); err != nil {
		t.Skipf("no network-namespace test bed here: %v", err)
	}
}

var bedLine = regexp.MustCompile(`^bed ([0-9a-f]{4}): `)

// runLiveBed runs `peer testbed ARGS --json F` with this test binary as
// the peers and returns the decoded report and its bytes.
func runLiveBed(t *testing.T, args ...string) (testbedReport, []byte) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testbedExe, testbedEnv = exe, []string{testbedChild + "=1"}
	defer func() { testbedExe, testbedEnv = "", nil }()
	report := filepath.Join(t.TempDir(), "bed.json")
	var out, errb bytes.Buffer
	t0 := time.Now()
	err = runTestbed(append(args, "--json", report), &out, &errb)
	t.Logf("%.1f s\n%s\n%s", time.Since(t0).Seconds(), out.String(), errb.String())
	if err != nil {
		t.Fatal(err)
	}
	var rep testbedReport
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, b
}

// TestTestbed_Live runs a 10-peer prefix bed with a superpeer cut off and
// a half/half partition, and checks the report and that nothing is left.
func TestTestbed_Live(t *testing.T) {
	liveBed(t)
	rep, b := runLiveBed(t, "--n", "10", "--superpeers", "3", "--method", "prefix", "--seed", "1",
		"--cut", "5s", "--partition", "10s", "--timeout", "90s", "--start-rate", "50")
	tb := rep.Testbed
	if tb == nil || rep.Superpeers == nil || tb.Partition == nil || tb.Cut == nil {
		t.Fatalf("report lacks blocks: %s", b)
	}
	if rep.N != 10 || rep.Seed != 1 || len(rep.Peers) != 10 || rep.Superpeers.Wrong != 0 || rep.Superpeers.Unserved != 0 {
		t.Errorf("report: n %d, seed %d, %d peers, wrong %d, unserved %d", rep.N, rep.Seed, len(rep.Peers), rep.Superpeers.Wrong, rep.Superpeers.Unserved)
	}
	if p := tb.Partition; !p.Healed || p.After.Count != int(p.After.Expected+0.5) && p.After.Count > 3 || p.After.Unserved != 0 || p.After.Wrong != 0 {
		t.Errorf("partition: %+v, after %+v", p, p.After)
	}
	if !tb.Cut.WasSuperpeer {
		t.Errorf("the cut peer was no superpeer: %+v", tb.Cut)
	}
	if tb.LeftBehind != "" {
		t.Errorf("left behind: %s", tb.LeftBehind)
	}
	nss, links, err := testbed.Leftovers(testbed.Prefix + tb.RunID)
	if err != nil || len(nss)+len(links) > 0 {
		t.Errorf("left behind: namespaces %v, links %v (%v)", nss, links, err)
	}
}

// TestTestbed_LiveRepel runs an 8-peer repel bed through a half/half
// partition: the tokens settle, the heal leaves every token held once
// (none duplicated, none missing) with every client attached, the report
// carries the live coordinates' error, and nothing is left.
func TestTestbed_LiveRepel(t *testing.T) {
	liveBed(t)
	rep, b := runLiveBed(t, "--n", "8", "--superpeers", "2", "--method", "repel", "--seed", "3",
		"--partition", "10s", "--timeout", "120s", "--start-rate", "50")
	tb := rep.Testbed
	if tb == nil || rep.Superpeers == nil || tb.Partition == nil || tb.Vivaldi == nil {
		t.Fatalf("report lacks blocks: %s", b)
	}
	if rep.Method != "repel" || rep.Superpeers.Count != 2 || rep.Superpeers.Wrong != 0 || rep.Superpeers.Unserved != 0 {
		t.Errorf("selection: method %q, %d superpeers (want 2), wrong %d, unserved %d", rep.Method, rep.Superpeers.Count, rep.Superpeers.Wrong, rep.Superpeers.Unserved)
	}
	if p := tb.Partition; !p.Healed || p.After == nil || p.After.Count != 2 || p.After.Unserved != 0 || p.After.Wrong != 0 {
		t.Errorf("partition: %+v, after %+v", p, p.After)
	}
	if v := tb.Vivaldi; !(v[0] >= 0 && v[1] >= v[0]) {
		t.Errorf("vivaldi error %v", v)
	}
	// The peers' Vivaldi RTTs are the transports' own (--rtt transport,
	// the default): every connection in the bed is TCP or QUIC.
	if tb.RTT != "transport" || tb.TransportShare == nil || *tb.TransportShare != 1 {
		t.Errorf("vivaldi rtt %q, transport share %v, want every sample", tb.RTT, tb.TransportShare)
	}
	// A repel bed runs on TCP unless told: the kernel measures its RTTs.
	if rep.Transport != "netns (tcp)" {
		t.Errorf("transport %q, want TCP alone", rep.Transport)
	}
	nss, links, err := testbed.Leftovers(testbed.Prefix + tb.RunID)
	if err != nil || len(nss)+len(links) > 0 {
		t.Errorf("left behind: namespaces %v, links %v (%v)", nss, links, err)
	}
}

// TestTestbed_LiveInterrupted sends SIGTERM to a bed while its peers run
// and checks that it removes everything it made.
func TestTestbed_LiveInterrupted(t *testing.T) {
	liveBed(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "testbed", "--n", "4", "--superpeers", "2", "--seed", "2", "--timeout", "60s")
	cmd.Env = append(os.Environ(), testbedChild+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	id := ""
	for lines.Scan() {
		if m := bedLine.FindStringSubmatch(lines.Text()); m != nil {
			id = m[1]
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if id == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no bed line; stderr:\n%s", errb.String())
	}
	// Wait until its peers run, then interrupt.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errb.String(), "peer processes started") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	nss, _, _ := testbed.Leftovers(testbed.Prefix + id)
	if len(nss) == 0 {
		t.Errorf("bed %s has no namespaces while it runs", id)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the bed did not end within 30 s of SIGTERM")
	}
	nss, links, err := testbed.Leftovers(testbed.Prefix + id)
	if err != nil || len(nss)+len(links) > 0 {
		t.Errorf("interrupted bed %s left namespaces %v, links %v (%v); stderr:\n%s", id, nss, links, err, errb.String())
	}
	if !strings.Contains(errb.String(), "removed: no namespace or link of it is left") {
		t.Errorf("no removal line; stderr:\n%s", errb.String())
	}
}

// TestBootstrapped: `peer run` goes on after a bootstrap that joined but
// whose refresh of every bucket ran out of time (as 120 peers over
// PlanetLab RTTs in the test bed did), and retries one that did not join.
func TestBootstrapped(t *testing.T) {
	deadline := fmt.Errorf("refresh: %w", context.DeadlineExceeded)
	for _, c := range []struct {
		err  error
		rt   int
		want bool
	}{
		{nil, 0, true}, {nil, 5, true},
		{deadline, 3, true}, {deadline, 0, false},
		{errors.New("failed to join"), 3, false}, {context.Canceled, 3, false},
	} {
		if got := bootstrapped(c.err, c.rt); got != c.want {
			t.Errorf("bootstrapped(%v, %d) = %v, want %v", c.err, c.rt, got, c.want)
		}
	}
}

// TestTestbed_LiveNATRelays runs 16 prefix peers, 6 of them each behind a
// masquerading NAT of its own, with --relay superpeer: no NAT'd peer is a
// superpeer, every NAT'd peer holds a reservation with its own superpeer,
// every pair of NAT'd peers pings across its relayed path at about the
// matrix's RTT through that relay, no relay holds more than the capacity,
// and nothing is left.
func TestTestbed_LiveNATRelays(t *testing.T) {
	liveBed(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft here")
	}
	rep, b := runLiveBed(t, "--n", "16", "--nat", "0.4", "--superpeers", "3", "--seed", "1", "--timeout", "2m",
		"--start-rate", "50")
	r := rep.Testbed.Relay
	if r == nil || rep.Superpeers == nil {
		t.Fatalf("report lacks the relay or selection block: %s", b)
	}
	nat := map[int]bool{}
	for _, pr := range r.Pairs {
		nat[pr.From], nat[pr.To] = true, true
	}
	for i, p := range rep.Peers {
		if nat[i] && p.Role == "superpeer" {
			t.Errorf("NAT'd peer %d is a superpeer", i)
		}
	}
	if r.Mode != "superpeer" || r.NATPeers != 6 || r.WithOwnSuperpeer != r.NATPeers || len(r.Pairs) != 15 || r.Pinged != len(r.Pairs) {
		t.Errorf("relays: mode %s, %d NAT'd, %d with their own superpeer, %d of %d pairs pinged", r.Mode, r.NATPeers, r.WithOwnSuperpeer, r.Pinged, len(r.Pairs))
	}
	for _, pr := range r.Pairs {
		// The bed's own delay: a few ms, and the relay's hop.
		if pr.Error != "" || pr.Measured < pr.ViaMatrix*0.9 || pr.Measured > pr.ViaMatrix*1.1+15 || pr.Best > pr.ViaMatrix+1e-9 {
			t.Errorf("pair %d→%d: measured %.1f ms, %.1f through relay %d by the matrix, best %.1f (%s)", pr.From, pr.To, pr.Measured, pr.ViaMatrix, pr.Via, pr.Best, pr.Error)
		}
	}
	for _, l := range r.Load {
		if !l.Superpeer || l.Reservations < 0 || l.Reservations > l.Capacity || l.Clients > l.Capacity {
			t.Errorf("relay %+v: want a superpeer within its capacity", l)
		}
	}
	if r.Over != 0 || rep.Testbed.LeftBehind != "" {
		t.Errorf("%d relays over capacity; left behind: %q", r.Over, rep.Testbed.LeftBehind)
	}
	nss, links, err := testbed.Leftovers(testbed.Prefix + rep.Testbed.RunID)
	if err != nil || len(nss)+len(links) > 0 {
		t.Errorf("left behind: namespaces %v, links %v (%v)", nss, links, err)
	}
}
