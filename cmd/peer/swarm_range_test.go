package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSwarm_RangesAcrossProcessesMerge: two `peer swarm` runs on TCP
// loopback, each running half of one overlay's peers, the second joining
// through the address the first wrote, select the prefix superpeers all
// keys call for, and `peer merge` joins their reports into the overlay's;
// the first run ends once the second's peers have left.
func TestSwarm_RangesAcrossProcessesMerge(t *testing.T) {
	if testing.Short() {
		// Not in the short suite: on a loaded machine one run in four
		// hung with a range keeping a superpeer that a peer of the other
		// range should have replaced (three ranges started at once do so
		// every time with this seed; see the notes of issue 16). The
		// swarm-level test (experiments/swarm, every range converged
		// before any selects) runs in it.
		t.Skip("two swarm processes' selection end to end: without -short")
	}
	dir := t.TempDir()
	addrFile, merged := filepath.Join(dir, "a.addr"), filepath.Join(dir, "m.json")
	ra, rb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	common := []string{"swarm", "--timeout", "2m", "--transport", "tcp", "--n", "40", "--seed", "5", "--superpeers", "4", "--latency", "synthetic", "--lookups", "10"}
	type result struct {
		code      int
		out, errb string
	}
	start := func(args ...string) chan result {
		done := make(chan result, 1)
		go func() {
			var out, errb bytes.Buffer
			code := run(append(append([]string(nil), common...), args...), &out, &errb)
			done <- result{code, out.String(), errb.String()}
		}()
		return done
	}
	first := start("--peers", "0:20", "--addr-file", addrFile, "--linger", "2m", "--json", ra)
	waitAddr := func(file string, done chan result) string {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			select {
			case r := <-done:
				t.Fatalf("a run ended (exit %d) before writing its address: %s", r.code, r.errb)
			case <-time.After(100 * time.Millisecond):
			}
			if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
				return strings.Fields(string(b))[0]
			}
		}
		t.Fatalf("no address in %s after a minute", file)
		return ""
	}
	join := waitAddr(addrFile, first)
	if !strings.HasPrefix(join, "/ip4/127.0.0.1/tcp/") || !strings.Contains(join, "/p2p/") {
		t.Fatalf("address to join %q", join)
	}
	var out, errb bytes.Buffer
	if code := run(append(append([]string(nil), common...), "--peers", "20:40", "--join", join, "--linger", "3s", "--json", rb), &out, &errb); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errb.String())
	}
	for k, done := range []chan result{first} {
		select {
		case r := <-done:
			if r.code != 0 {
				t.Fatalf("run %d: exit %d: %s", k+1, r.code, r.errb)
			}
			if !strings.Contains(r.errb, "no peer of a later range connected") {
				t.Errorf("run %d did not end with the later one: %q", k+1, lastLine(r.errb))
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("run %d lingers after the later one ended", k+1)
		}
	}
	var rep swarmReport
	if b, err := os.ReadFile(rb); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Transport != "tcp" || rep.Range == nil || rep.Range.From != 20 || rep.Range.To != 40 || len(rep.Peers) != 20 || rep.Peers[0].Index != 20 || len(rep.Range.Joined) != 1 {
		t.Fatalf("second report: transport %q, range %+v, %d peers", rep.Transport, rep.Range, len(rep.Peers))
	}

	m := mergeReports(t, merged, rb, ra)
	if m.N != 40 || len(m.Parts) != 2 || m.Parts[0].From != 0 || len(m.Peers) != 40 || !m.Exact || m.Superpeers.Count != 4 || m.Superpeers.Unserved != 0 {
		t.Fatalf("merged: n %d, %d parts, %d peers, exact %v, %d superpeers, %d unserved", m.N, len(m.Parts), len(m.Peers), m.Exact, m.Superpeers.Count, m.Superpeers.Unserved)
	}
	if !(m.Superpeers.ClientRTT.Mean > 0) || !(m.Superpeers.KMedianClientRTT.Mean > 0) || m.ListedNot != 0 || m.Superpeers.ClientsPerSuperpeer.Max > m.Superpeers.Capacity {
		t.Errorf("merged: %d listed by nobody, %+v", m.ListedNot, m.Superpeers)
	}

	// A superpeer whose report does not list a client that names it: the
	// merge counts the client wrong and fails.
	var doctored swarmReport
	if b, err := os.ReadFile(ra); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &doctored); err != nil {
		t.Fatal(err)
	}
	dropped := false
	for sp, cs := range doctored.Range.Clients {
		if len(cs) > 0 {
			doctored.Range.Clients[sp], dropped = cs[1:], true
			break
		}
	}
	if !dropped {
		t.Fatal("no superpeer of the first run lists a client")
	}
	bad := filepath.Join(dir, "doctored.json")
	if err := writeJSON(bad, doctored); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"merge", bad, rb}, &out, &errb); code != 1 || !strings.Contains(out.String(), "1 wrong (1 attached to a superpeer whose report does not list them)") {
		t.Errorf("doctored merge: exit %d, %q", code, out.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"merge", ra}, "the reports hold 20 peers"},
		{[]string{"merge", ra, ra}, "overlap or miss"},
		{[]string{"merge"}, "usage"},
	} {
		errb.Reset()
		if code := run(c.args, &out, &errb); code == 0 || !strings.Contains(lastLine(errb.String()), c.want) {
			t.Errorf("%v: exit %d, %q; want an error containing %q", c.args, code, lastLine(errb.String()), c.want)
		}
	}
}

func TestSwarm_RangeFlagsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"swarm", "--peers", "0:10"}, "need --transport tcp or quic"},
		{[]string{"swarm", "--transport", "tcp", "--peers", "5:3"}, "--peers"},
		{[]string{"swarm", "--transport", "tcp", "--peers", "0:300"}, "--peers"},
		{[]string{"swarm", "--transport", "tcp", "--join", "/ip4/127.0.0.1/tcp/1"}, "--join"},
		{[]string{"swarm", "--transport", "udp"}, "--transport"},
		{[]string{"swarm", "--transport", "quic", "--method", "repel"}, "--method prefix or none"},
		{[]string{"swarm", "--transport", "tcp", "--vivaldi"}, "--vivaldi"},
		{[]string{"swarm", "--transport", "tcp", "--method", "prefix", "--peers", "0:100", "--kill", "0.1"}, "whole swarm"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(lastLine(errb.String()), c.want) {
			t.Errorf("%v: exit %d, %q; want a usage error containing %q", c.args, code, lastLine(errb.String()), c.want)
		}
	}
}

// mergeReports runs `peer merge --json merged REPORT…`, which must succeed
// (an exact selection), and returns the merged report.
func mergeReports(t *testing.T, merged string, reports ...string) mergedReport {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"merge", "--json", merged}, reports...), &out, &errb); code != 0 {
		t.Fatalf("merge: exit %d: %s %s", code, out.String(), errb.String())
	}
	var m mergedReport
	if b, err := os.ReadFile(merged); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
