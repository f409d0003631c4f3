package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
)

// buildPeer compiles the command once per test binary.
var buildPeer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "peer-cmd")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "peer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{string(out)}
	}
	return bin, nil
})

type buildError struct{ out string }

func (e *buildError) Error() string { return "go build: " + e.out }

// proc is a running `peer run` whose log lines are collected.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	cond  *sync.Cond
}

func startPeer(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCommand(t, "run", args...)
}

// startCommand starts `peer CMD ARGS...` and collects its log; the test's
// cleanup interrupts it (killing it after 20 s) and prints the log if the
// test failed.
func startCommand(t *testing.T, cmd string, args ...string) *proc {
	t.Helper()
	bin, err := buildPeer()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.Command(bin, append([]string{cmd}, args...)...)}
	p.cond = sync.NewCond(&p.mu)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.cond.Broadcast()
			p.mu.Unlock()
		}
		p.mu.Lock()
		p.lines = append(p.lines, "<exit>")
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("log of %v:\n%s", p.cmd.Args, strings.Join(p.lines, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// waitLine waits for a log line containing all of want and returns it.
func (p *proc) waitLine(t *testing.T, timeout time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; ; {
		for ; i < len(p.lines); i++ {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(p.lines[i], w)
			}
			if ok {
				return p.lines[i]
			}
			if p.lines[i] == "<exit>" {
				t.Fatalf("%v exited before logging %q", p.cmd.Args, want)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v: no log line with %q within %v", p.cmd.Args, want, timeout)
		}
		p.cond.Wait()
	}
}

func TestRun_ThreePeersFindEachOtherOverTCP(t *testing.T) {
	dir := t.TempDir()
	// One superpeer for three: the peer with the smallest key.
	common := []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--refresh", "2s", "--method", "prefix", "--superpeers", "1", "--ttl", "1500ms"}
	p1 := startPeer(t, append(common, "--key", filepath.Join(dir, "k1"))...)
	line := p1.waitLine(t, 30*time.Second, "listening on /ip4/127.0.0.1/tcp/")
	addr1 := line[strings.Index(line, "/ip4/"):]
	id1 := addr1[strings.LastIndex(addr1, "/")+1:]

	p2 := startPeer(t, append(common, "--key", filepath.Join(dir, "k2"), "--bootstrap", addr1)...)
	p3 := startPeer(t, append(common, "--key", filepath.Join(dir, "k3"), "--bootstrap", addr1, "--http", "127.0.0.1:0")...)
	id := func(p *proc) string {
		l := p.waitLine(t, 30*time.Second, "peer 12D3")
		return strings.Fields(l)[len(strings.Fields(l))-1]
	}
	id2, id3 := id(p2), id(p3)
	for _, c := range []struct {
		p      *proc
		others []string
	}{{p1, []string{id2, id3}}, {p2, []string{id1, id3}}, {p3, []string{id1, id2}}} {
		for _, o := range c.others {
			c.p.waitLine(t, 60*time.Second, "found peer "+o)
		}
	}

	// Exactly the peer with the smallest key is the superpeer; the other two
	// are its clients.
	procs := map[string]*proc{id1: p1, id2: p2, id3: p3}
	smallest := ""
	for id := range procs {
		if smallest == "" || keyOf(t, id).Less(keyOf(t, smallest)) {
			smallest = id
		}
	}
	for id, p := range procs {
		if id == smallest {
			p.waitLine(t, 60*time.Second, "role superpeer, superpeer "+id)
		} else {
			p.waitLine(t, 60*time.Second, "role client, superpeer "+smallest)
		}
	}

	// The status endpoint lists both other peers.
	l := p3.waitLine(t, 10*time.Second, "status on http://")
	url := l[strings.Index(l, "http://"):]
	resp, err := httpGet(url)
	if err != nil {
		t.Fatal(err)
	}
	var st status
	if err := json.Unmarshal(resp, &st); err != nil {
		t.Fatalf("status %s: %v", resp, err)
	}
	if st.ID != id3 || len(st.RoutingTable) != 2 || st.Role == "" {
		t.Errorf("status: id %s (want %s), routing table %v (want 2 peers), role %q", st.ID, id3, st.RoutingTable, st.Role)
	}

	// The identity persists: a restarted peer keeps its ID.
	if b, err := os.ReadFile(filepath.Join(dir, "k1")); err != nil || len(b) == 0 {
		t.Fatalf("identity key not written: %v", err)
	}
}

func TestRun_KeepsIdentityAcrossRestarts(t *testing.T) {
	key := filepath.Join(t.TempDir(), "id.key")
	args := []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--key", key}
	first := startPeer(t, args...).waitLine(t, 30*time.Second, "peer 12D3")
	second := startPeer(t, args...).waitLine(t, 30*time.Second, "peer 12D3")
	if strings.Fields(first)[len(strings.Fields(first))-1] != strings.Fields(second)[len(strings.Fields(second))-1] {
		t.Errorf("identity changed across restarts: %q vs %q", first, second)
	}
}

func TestCLI_BadInputIsAOneLineError(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.tsv")
	if err := os.WriteFile(bad, []byte("0\t1\n1\t0\t5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbageKey := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbageKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"swarm", "--n", "x"}, 2, "invalid value"},
		{[]string{"swarm", "--n", "1"}, 2, "at least 2 peers"},
		{[]string{"swarm", "--latency", filepath.Join(dir, "missing.tsv")}, 1, "no such file"},
		{[]string{"swarm", "--latency", bad}, 1, "line 2"},
		{[]string{"swarm", "--latency", "synthetic:bogus"}, 2, "unknown synthetic option"},
		{[]string{"swarm", "stray"}, 2, "unexpected argument"},
		{[]string{"swarm", "--conns", "64:32"}, 2, "--conns"},
		{[]string{"swarm", "--conns", "many"}, 2, "--conns"},
		{[]string{"swarm", "--conn-grace", "0s"}, 2, "--conn-grace"},
		{[]string{"swarm", "--memlimit", "lots"}, 2, "--memlimit"},
		{[]string{"swarm", "--stall", "-1ms"}, 2, "--stall"},
		{[]string{"swarm", "--vivaldi-after", "-1s"}, 2, "--vivaldi-after"},
		{[]string{"swarm", "--memlimit", "0MiB"}, 2, "--memlimit"},
		{[]string{"swarm", "--memlimit", "99999999999GiB"}, 2, "--memlimit"},
		{[]string{"swarm", "--pprof", "nowhere:port"}, 2, "--pprof"},
		{[]string{"swarm", "--displace", "-1ms"}, 2, "--displace"},
		{[]string{"swarm", "--method", "prefix,bogus"}, 2, `unknown method "bogus" (registered: prefix, repel`},
		{[]string{"swarm", "--method", "prefix,repel", "--kill", "0.1"}, 2, "need one --method"},
		{[]string{"swarm", "--method", "all", "--dilate", "2"}, 2, "--dilate is for --method repel"},
		{[]string{"swarm", "--method", "repel", "--vivaldi=false"}, 2, "needs --vivaldi"},
		{[]string{"swarm", "--warm-dilate", "0.5"}, 2, "--warm-dilate 0.5 must be 0 or in [1, 1000]"},
		{[]string{"swarm", "--transport", "tcp", "--method", "prefix", "--warm-dilate", "2"}, 2, "--warm-dilate need --transport mocknet"},
		{[]string{"sim", "--method", "none"}, 2, "nothing to simulate"},
		{[]string{"sim", "--superpeers", "0"}, 2, "--superpeers 0"},
		{[]string{"sim", "--latency", bad}, 1, "line 2"},
		{[]string{"swarm", "--survey", "-1s"}, 2, "--survey"},
		{[]string{"swarm", "--method", "repel", "--hold", "-1s"}, 2, "--hold"},
		{[]string{"swarm", "--method", "repel", "--rest", "-1"}, 2, "--rest"},
		{[]string{"swarm", "--method", "repel", "--rest", "NaN"}, 2, "--rest"},
		{[]string{"swarm", "--method", "repel", "--in-transit", "1"}, 2, "--in-transit"},
		{[]string{"swarm", "--method", "repel", "--in-transit", "-0.1"}, 2, "--in-transit"},
		{[]string{"swarm", "--method", "repel", "--in-transit", "NaN"}, 2, "--in-transit"},
		{[]string{"swarm", "--method", "repel", "--probe", "0"}, 2, "--probe"},
		{[]string{"swarm", "--method", "repel", "--explore", "-1"}, 2, "--explore"},
		{[]string{"swarm", "--method", "repel", "--explore-first", "-1"}, 2, "--explore-first"},
		{[]string{"swarm", "--hold", "1m"}, 2, "--hold is for --method repel"},
		{[]string{"run", "--displace", "-1ms"}, 2, "--displace"},
		{[]string{"run", "--survey", "-1s"}, 2, "--survey"},
		{[]string{"run", "--listen", "garbage"}, 2, "--listen"},
		{[]string{"run", "--method", "prefix", "--fraction", "1.5"}, 2, "--fraction"},
		{[]string{"swarm", "--method", "prefix", "--fraction", "-0.1"}, 2, "--fraction"},
		{[]string{"swarm", "--fraction", "0.1"}, 2, "--fraction needs one --method"},
		{[]string{"run", "--method", "none", "--fraction", "0.1"}, 2, "--fraction needs --method prefix"},
		{[]string{"run", "--method", "prefix", "--pow2", "--fraction", "0.1"}, 2, "--fraction needs --method prefix (without --pow2)"},
		{[]string{"run", "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, 2, "/p2p/"},
		{[]string{"run", "--relay", "everyone"}, 2, "--relay"},
		{[]string{"run", "--relay", "superpeer"}, 2, "--relay superpeer needs a selection --method"},
		{[]string{"run", "--reachability", "maybe"}, 2, "--reachability"},
		{[]string{"run", "--advertise", "nowhere"}, 2, "--advertise"},
		{[]string{"testbed", "--nat", "1"}, 2, "--nat"},
		{[]string{"testbed", "--nat", "0.3", "--method", "repel"}, 2, "--nat needs --method prefix"},
		{[]string{"testbed", "--nat", "0.3", "--relay", "nearest"}, 2, "--relay"},
		{[]string{"testbed", "--nat", "0.3", "--relay-pairs", "0"}, 2, "--relay-pairs"},
		{[]string{"testbed", "--n", "9", "--nat", "0.01"}, 2, "puts no peer behind NAT"},
		{[]string{"run", "--key", garbageKey, "--listen", "/ip4/127.0.0.1/tcp/0"}, 1, "identity key"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, errb.String())
		}
		last := lastLine(errb.String())
		if !strings.Contains(last, c.want) || !strings.HasPrefix(last, "peer") {
			t.Errorf("%v: last stderr line %q, want a 'peer ...' error containing %q", c.args, last, c.want)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// swarmRun runs `peer swarm args... --json FILE` and returns its report,
// stdout and stderr.
func swarmRun(t *testing.T, args ...string) (rep swarmReport, stdout, stderr string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	var out, errb bytes.Buffer
	if code := run(append(append([]string{"swarm"}, args...), "--json", path), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, out.String(), errb.String()
}

func TestSwarm_SmallRunWritesReport(t *testing.T) {
	rep, out, _ := swarmRun(t, "--method", "prefix", "--n", "40", "--seed", "5", "--latency", "synthetic", "--lookups", "20")
	if rep.N != 40 || rep.Seed != 5 || len(rep.Peers) != 40 || rep.Lookup.Tried != 20 || rep.Lookup.Exact != 20 {
		t.Errorf("report: n %d seed %d peers %d lookup %+v", rep.N, rep.Seed, len(rep.Peers), rep.Lookup)
	}
	if !strings.Contains(out, "seed 5") {
		t.Errorf("the seed is not printed: %q", out)
	}
	seen := map[string]bool{}
	for _, p := range rep.Peers {
		if len(p.Key) != 64 || seen[p.ID] {
			t.Errorf("peer %+v: bad key or duplicate id", p)
		}
		seen[p.ID] = true
	}
}

// A repel swarm is scored once its selection has rested: the report says
// how long it rested, and the resting state began at or after the first
// convergence.
func TestSwarm_RepelScoredAtRest(t *testing.T) {
	rep, out, _ := swarmRun(t, "--method", "repel", "--n", "40", "--superpeers", "4", "--seed", "3", "--latency", "synthetic", "--lookups", "10")
	r, sum := rep.Rest, rep.Superpeers
	if r == nil || sum == nil {
		t.Fatalf("no rest or selection in the report: %+v, %+v", r, sum)
	}
	if rep.StallMs != 0 || rep.Methods[0].VivaldiAfter == nil || rep.Methods[0].VivaldiAfter.Stalls != nil {
		t.Errorf("an undilated run checked its samples for stalls: --stall %v ms", rep.StallMs)
	}
	if r.Renewals != 1.5 || r.RestSeconds != 1.5*rep.TTLSeconds/3 {
		t.Errorf("rested %v renewals, %v s; want 1.5 renewals of a %v s TTL", r.Renewals, r.RestSeconds, rep.TTLSeconds)
	}
	// 36 clients: the default 1% allows none in transit.
	if r.InTransitFraction != 0.01 || r.InTransitAllowed != 0 || r.InTransitMax != 0 || r.InTransitEnd != 0 {
		t.Errorf("in transit: fraction %v, allowed %d, at most %d, at the end %d; want 0.01, 0, 0, 0", r.InTransitFraction, r.InTransitAllowed, r.InTransitMax, r.InTransitEnd)
	}
	if !(r.FirstConvergedSeconds > 0 && r.FirstConvergedSeconds <= sum.ConvergeSeconds) {
		t.Errorf("first converged at %v s, at rest from %v s", r.FirstConvergedSeconds, sum.ConvergeSeconds)
	}
	if sum.Count != 4 || sum.Unserved != 0 || sum.Wrong != 0 {
		t.Errorf("scored selection: %d superpeers, %d unserved, %d wrong", sum.Count, sum.Unserved, sum.Wrong)
	}
	if c := rep.Methods[0].Connections; c == nil || !(c.ProtectedMean > 0 && c.ProtectedMean <= c.Mean) || c.UnprotectedMax > c.Max {
		t.Errorf("connections at convergence: %+v", c)
	} else if c.MaxPeer < 0 || c.MaxPeer >= 40 {
		t.Errorf("connections: the most (%d) on peer %d of 40", c.Max, c.MaxPeer)
	}
	if !strings.Contains(out, "at rest          from") {
		t.Errorf("the rest is not printed:\n%s", out)
	}
}

// --guard: the token method runs guarded to the end, and the report says
// so (repel.guard) and prints what the guard refused.
func TestSwarm_RepelGuarded(t *testing.T) {
	rep, out, _ := swarmRun(t, "--method", "repel", "--n", "40", "--superpeers", "4", "--seed", "3", "--latency", "synthetic", "--lookups", "10", "--guard")
	if rep.Repel == nil || !rep.Repel.Guard || rep.Superpeers == nil {
		t.Fatalf("no guarded repel block: %+v", rep.Repel)
	}
	if sum := rep.Superpeers; sum.Count != 4 || sum.Unserved != 0 || sum.Wrong != 0 {
		t.Errorf("guarded selection: %d superpeers, %d unserved, %d wrong", sum.Count, sum.Unserved, sum.Wrong)
	}
	if !strings.Contains(out, "guard            untraced versions refused") {
		t.Errorf("the guard's line is not printed:\n%s", out)
	}
}

// --warm-dilate 1 --dilate 3: the coordinates warm up undilated, then the
// swarm dilates (the running services following) and reports both factors.
func TestSwarm_WarmsUpUndilatedThenDilates(t *testing.T) {
	rep, out, errs := swarmRun(t, "--method", "none", "--n", "24", "--seed", "2", "--lookups", "10", "--vivaldi-bound", "0.4",
		"--warm-dilate", "1", "--dilate", "3")
	if rep.Dilation != 3 || rep.WarmDilation != 1 || rep.Vivaldi == nil || rep.Vivaldi.Stopped == "" {
		t.Errorf("dilation %v, warm-up's %v, vivaldi %+v", rep.Dilation, rep.WarmDilation, rep.Vivaldi)
	}
	if rep.StallMs != 5 {
		t.Errorf("a dilated run's --stall is %v ms, want the default 5", rep.StallMs)
	}
	if !strings.Contains(out+errs, "the warm-up ran at ×1") {
		t.Errorf("the change of dilation is not logged:\n%s\n%s", out, errs)
	}
}

func httpGet(url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func keyOf(t *testing.T, id string) dht.Key {
	t.Helper()
	p, err := peer.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	return dht.KeyOf(p)
}

func TestParseMemTotal(t *testing.T) {
	cases := map[string]uint64{
		"MemTotal:       24683608 kB\nMemFree:  1 kB\n": 24683608 << 10,
		"MemFree: 5 kB\nMemTotal: 2 kB":                 2 << 10,
		"MemTotal: lots kB\n":                           0,
		"MemTotal: 7 MB\n":                              0,
		"":                                              0,
	}
	for in, want := range cases {
		if got := parseMemTotal(in); got != want {
			t.Errorf("parseMemTotal(%q) = %d, want %d", in, got, want)
		}
	}
	if runtime.GOOS == "linux" && memTotal() == 0 {
		t.Error("memTotal: 0 on Linux")
	}
}

func TestParseMemLimit(t *testing.T) {
	for _, c := range []struct {
		v    string
		n    int
		want int64
	}{
		{"", 100, -1},
		{"off", 100, 0},
		{"auto", 490, 490 << 21},
		{"900MiB", 1, 900 << 20},
		{"4GiB", 1, 4 << 30},
		{"512KiB", 1, 512 << 10},
		{"1000000B", 1, 1000000},
	} {
		got, err := parseMemLimit(c.v, c.n)
		if err != nil || got != c.want {
			t.Errorf("parseMemLimit(%q, %d) = %d, %v; want %d", c.v, c.n, got, err, c.want)
		}
	}
}

// The progress lines: a stage's completion prints at once, but a stage that
// stays complete prints no more often than every interval (a repel run
// whose clients are all attached while its tokens are surveyed printed
// "select 200/200" hundreds of times).
func TestProgress_CompletionPrintsOnce(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b)
	p.update("select", 0, 10)
	p.update("select", 5, 10) // within the interval: not printed
	for i := 0; i < 50; i++ {
		p.update("select", 10, 10)
	}
	p.update("select", 9, 10)  // within the interval: not printed
	p.update("select", 10, 10) // complete again: printed
	p.update("other", 1, 1)
	want := []string{"select 0/10", "select 10/10", "select 10/10", "other 1/1"}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		f := strings.Fields(line)
		got = append(got, f[0]+" "+f[1])
	}
	if !slices.Equal(got, want) {
		t.Errorf("printed %q, want %q", got, want)
	}
}

// --stall-trace needs the stall watch, and says so before a swarm is built:
// an undilated run without --stall, --stall 0, or no coordinates.
func TestSwarm_StallTraceNeedsTheWatch(t *testing.T) {
	file := filepath.Join(t.TempDir(), "stall.trace")
	for _, args := range [][]string{
		{"swarm", "--n", "8", "--stall-trace", file},
		{"swarm", "--n", "8", "--dilate", "4", "--stall", "0", "--stall-trace", file},
		{"swarm", "--n", "8", "--dilate", "4", "--method", "prefix", "--vivaldi=false", "--stall-trace", file},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(lastLine(errb.String()), "--stall-trace needs the stall watch") {
			t.Errorf("%v: exit %d, %q; want the usage error", args, code, lastLine(errb.String()))
		}
		if strings.Contains(out.String(), "join") || strings.Contains(errb.String(), "join ") {
			t.Errorf("%v: a swarm was built before the flags were refused", args)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a refused --stall-trace left %s behind (%v)", file, err)
	}
}

// --gomaxprocs: the flag when given, twice the CPUs for a dilated run, else
// the runtime's own; a negative value is a usage error.
func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		flag   int
		dilate float64
		cpus   int
		want   int
	}{
		{0, 1, 2, 0}, {0, 8, 2, 4}, {0, 4, 16, 32}, {3, 8, 2, 3}, {1, 1, 2, 1},
	} {
		if got := procsFor(c.flag, c.dilate, c.cpus); got != c.want {
			t.Errorf("procsFor(%d, %g, %d) = %d, want %d", c.flag, c.dilate, c.cpus, got, c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"swarm", "--n", "8", "--gomaxprocs", "-1"}, &out, &errb); code != 2 || !strings.Contains(lastLine(errb.String()), "--gomaxprocs") {
		t.Errorf("--gomaxprocs -1: exit %d, %q; want a usage error", code, lastLine(errb.String()))
	}
}
