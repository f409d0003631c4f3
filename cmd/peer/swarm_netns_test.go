package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/testbed"
)

// TestSwarm_RangesAcrossNamespaces: one overlay across two network stacks,
// as across two machines. Two network namespaces joined by a veth pair
// (10.254.k.1 and .2, nothing else routed) each run a `peer swarm
// --transport tcp` process listening on its own address, one half of the
// overlay's peers each, the second joining through the address the first
// wrote; `peer merge` finds the prefix superpeers all keys call for, every
// client listed by its superpeer's report. Root and `ip` only; the
// namespaces and the veth go with the test.
func TestSwarm_RangesAcrossNamespaces(t *testing.T) {
	liveBed(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	k := os.Getpid()%200 + 20
	tag := fmt.Sprintf("%srng%d", testbed.Prefix, k)
	nsA, nsB := tag+"a", tag+"b"
	ipA, ipB := fmt.Sprintf("10.254.%d.1", k), fmt.Sprintf("10.254.%d.2", k)
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", nsA).Run()
		_ = exec.Command("ip", "netns", "del", nsB).Run()
		if nss, links, err := testbed.Leftovers(tag); err != nil || len(nss)+len(links) > 0 {
			t.Errorf("left behind: namespaces %v, links %v (%v)", nss, links, err)
		}
	})
	sh("ip", "netns", "add", nsA)
	sh("ip", "netns", "add", nsB)
	sh("ip", "link", "add", tag+"x", "netns", nsA, "type", "veth", "peer", "name", tag+"y", "netns", nsB)
	for _, c := range []struct{ ns, dev, ip string }{{nsA, tag + "x", ipA}, {nsB, tag + "y", ipB}} {
		sh("ip", "-n", c.ns, "addr", "add", c.ip+"/24", "dev", c.dev)
		sh("ip", "-n", c.ns, "link", "set", c.dev, "up")
		sh("ip", "-n", c.ns, "link", "set", "lo", "up")
	}

	dir := t.TempDir()
	addrFile, merged := filepath.Join(dir, "a.addr"), filepath.Join(dir, "m.json")
	ra, rb := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	common := []string{"swarm", "--timeout", "2m", "--transport", "tcp", "--n", "40", "--seed", "5", "--superpeers", "4", "--latency", "synthetic", "--lookups", "10"}
	start := func(ns string, args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, exe}, append(append([]string(nil), common...), args...)...)...)
		cmd.Env = append(os.Environ(), testbedChild+"=1")
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &errb, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &errb
	}
	first, firstOut := start(nsA, "--listen", ipA, "--peers", "0:20", "--addr-file", addrFile, "--linger", "2m", "--json", ra)
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	var join string
	for deadline := time.Now().Add(time.Minute); join == "" && time.Now().Before(deadline); {
		select {
		case err := <-exited:
			t.Fatalf("the first run ended (%v) before writing its address: %s", err, firstOut)
		case <-time.After(100 * time.Millisecond):
		}
		if b, err := os.ReadFile(addrFile); err == nil && strings.HasSuffix(string(b), "\n") {
			join = strings.Fields(string(b))[0]
		}
	}
	if !strings.HasPrefix(join, "/ip4/"+ipA+"/tcp/") || !strings.Contains(join, "/p2p/") {
		t.Fatalf("address to join %q (want one on %s): %s", join, ipA, firstOut)
	}
	second, secondOut := start(nsB, "--listen", ipB, "--peers", "20:40", "--join", join, "--linger", "3s", "--json", rb)
	if err := second.Wait(); err != nil {
		t.Fatalf("second run: %v: %s", err, secondOut)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("first run: %v: %s", err, firstOut)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("the first run lingers after the second ended: %s", firstOut)
	}
	for _, c := range []struct {
		file, ip string
		from     int
	}{{ra, ipA, 0}, {rb, ipB, 20}} {
		var rep swarmReport
		if b, err := os.ReadFile(c.file); err != nil {
			t.Fatal(err)
		} else if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		// Each range's own peers listen on its namespace's address; the
		// second joined through the first's.
		if rep.Range == nil || rep.Range.From != c.from || len(rep.Peers) != 20 || len(rep.Range.Join) == 0 || !strings.HasPrefix(rep.Range.Join[0], "/ip4/"+c.ip+"/tcp/") {
			t.Fatalf("%s: range %+v, %d peers", c.file, rep.Range, len(rep.Peers))
		}
		if c.from == 20 && (len(rep.Range.Joined) != 1 || rep.Range.Joined[0] != join) {
			t.Errorf("second range joined through %v, want %s", rep.Range.Joined, join)
		}
	}
	m := mergeReports(t, merged, ra, rb)
	if m.N != 40 || len(m.Parts) != 2 || len(m.Peers) != 40 || !m.Exact || m.Superpeers.Count != 4 || m.Superpeers.Unserved != 0 || m.ListedNot != 0 {
		t.Fatalf("merged: n %d, %d parts, %d peers, exact %v, %d superpeers, %d unserved, %d listed by nobody",
			m.N, len(m.Parts), len(m.Peers), m.Exact, m.Superpeers.Count, m.Superpeers.Unserved, m.ListedNot)
	}
}
