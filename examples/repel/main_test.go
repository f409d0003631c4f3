package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The example as CI runs it: every peer is printed with a superpeer that is
// one of the peers, and there are S of them.
func TestRun(t *testing.T) {
	const n, S = 8, 2
	var out bytes.Buffer
	start := time.Now()
	if err := run(1, n, S, 45*time.Second, &out); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	t.Logf("%.1f s:\n%s", time.Since(start).Seconds(), out.String())
	peers, sps := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "peer" {
			continue
		}
		peers[f[2]] = true
		i := strings.Index(line, " superpeer 12D3")
		if i < 0 {
			t.Errorf("no superpeer named: %q", line)
			continue
		}
		sps[strings.Fields(line[i:])[1]] = true
	}
	if len(peers) != n {
		t.Errorf("%d peers printed, want %d", len(peers), n)
	}
	if len(sps) != S {
		t.Errorf("%d superpeers named, want %d: %v", len(sps), S, sps)
	}
	for sp := range sps {
		if !peers[sp] {
			t.Errorf("superpeer %s is none of the peers", sp)
		}
	}
}
