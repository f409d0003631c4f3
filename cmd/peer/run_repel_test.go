package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRun_RepelFivePeersAgreeOnOneSuperpeer starts five `peer run --method
// repel --superpeers 1` processes on loopback, with short repel timers, and
// waits until their /status agrees: exactly one superpeer, holding the one
// token, and every other peer its client.
func TestRun_RepelFivePeersAgreeOnOneSuperpeer(t *testing.T) {
	start := time.Now()
	dir := t.TempDir()
	common := []string{
		"--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0", "--refresh", "2s",
		"--method", "repel", "--superpeers", "1", "--ttl", "10s",
		"--settle", "2s", "--dead", "4s", "--announce", "1s", "--vivaldi-interval", "200ms",
		"--survey", "1s",
	}
	const n = 5
	procs := make([]*proc, n)
	procs[0] = startPeer(t, append(common, "--key", filepath.Join(dir, "k0"))...)
	line := procs[0].waitLine(t, 30*time.Second, "listening on /ip4/127.0.0.1/tcp/")
	addr0 := line[strings.Index(line, "/ip4/"):]
	for i := 1; i < n; i++ {
		procs[i] = startPeer(t, append(common, "--key", filepath.Join(dir, fmt.Sprintf("k%d", i)), "--bootstrap", addr0)...)
	}
	ids := make([]string, n)
	urls := make([]string, n)
	for i, p := range procs {
		l := p.waitLine(t, 30*time.Second, "peer 12D3")
		ids[i] = strings.Fields(l)[len(strings.Fields(l))-1]
		l = p.waitLine(t, 30*time.Second, "status on http://")
		urls[i] = l[strings.Index(l, "http://"):]
		p.waitLine(t, 60*time.Second, "selecting superpeers by repel: S = 1")
	}

	// Poll every peer's status until they agree.
	var sts []status
	agree := func() (int, string) {
		sts = sts[:0]
		for i, u := range urls {
			b, err := httpGet(u)
			if err != nil {
				return -1, fmt.Sprintf("peer %d: %v", i, err)
			}
			var st status
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("peer %d: status %s: %v", i, b, err)
			}
			sts = append(sts, st)
		}
		sp := -1
		for i, st := range sts {
			if st.Role == "superpeer" {
				if sp >= 0 {
					return -1, fmt.Sprintf("peers %d and %d are both superpeers", sp, i)
				}
				sp = i
			}
		}
		if sp < 0 {
			return -1, "no superpeer yet"
		}
		for i, st := range sts {
			if st.Superpeer != ids[sp] {
				return -1, fmt.Sprintf("peer %d (%s) has superpeer %q, want peer %d", i, st.Role, st.Superpeer, sp)
			}
		}
		return sp, ""
	}
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	sp, why := agree()
	for ; sp < 0; sp, why = agree() {
		if time.Now().After(deadline) {
			t.Fatalf("no agreement on one superpeer within 60 s: %s; statuses %+v", why, sts)
		}
		<-tick.C
	}
	t.Logf("peer %d (%s) is the superpeer of all %d after %.1f s", sp, ids[sp], n, time.Since(start).Seconds())

	// The superpeer's status shows its settled token; every peer knows of
	// one token and has a Vivaldi coordinate.
	if tok := sts[sp].Token; tok == nil || tok.ID != 0 || tok.Epoch == 0 || !tok.Settled {
		t.Errorf("superpeer status token %+v, want token 0, a positive epoch, settled", tok)
	}
	for i, st := range sts {
		if st.KnownTokens == nil || *st.KnownTokens != 1 {
			t.Errorf("peer %d: known_tokens %v, want 1", i, st.KnownTokens)
		}
		if st.Superpeers == nil || *st.Superpeers != (countStatus{S: 1}) {
			t.Errorf("peer %d: superpeers %+v, want S 1 (version 0)", i, st.Superpeers)
		}
		if st.Coord == nil || len(st.Coord.Vec) == 0 {
			t.Errorf("peer %d: no Vivaldi coordinate in status", i)
		}
		// --rtt transport (the default) over TCP on Linux: every
		// sample's RTT is the kernel's.
		if v := st.Vivaldi; v == nil || v.Samples == 0 || (runtime.GOOS == "linux" && v.TransportRTTs != v.Samples) {
			t.Errorf("peer %d: vivaldi samples %+v, want every one the kernel's RTT", i, v)
		}
		if i != sp && st.Token != nil {
			t.Errorf("client %d holds token %+v", i, *st.Token)
		}
	}
	// Role changes are logged.
	procs[sp].waitLine(t, 10*time.Second, "role superpeer, superpeer "+ids[sp])
	for i, p := range procs {
		if i != sp {
			p.waitLine(t, 10*time.Second, "role client, superpeer "+ids[sp])
		}
	}

	// Surveys over TCP: the holder's candidates get its surveys and report
	// back, and a survey keeps the holder's place. (Loopback RTTs measured
	// by five processes on a small machine differ by scheduling noise that
	// can pass SurveyFloor, so a survey may move the token first: logged,
	// not failed.)
	deadline = time.Now().Add(45 * time.Second)
	for {
		if sp, why = agree(); sp >= 0 {
			h := sts[sp]
			var candidates uint64
			for i, st := range sts {
				if i != sp && st.Surveys != nil {
					candidates += st.Surveys.FramesReceived
				}
			}
			if h.Token != nil && h.Token.Surveyed && h.Surveys != nil && h.Surveys.FramesReceived > 0 && candidates > 0 {
				t.Logf("superpeer %d: surveys %+v; candidates received %d survey frames", sp, *h.Surveys, candidates)
				for i, st := range sts {
					if st.Surveys != nil {
						t.Logf("peer %d: surveys %+v", i, *st.Surveys)
					}
				}
				break
			}
			why = fmt.Sprintf("superpeer %d token %+v surveys %+v, candidates received %d", sp, h.Token, h.Surveys, candidates)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no survey answered over TCP within 45 s: %s", why)
		}
		<-tick.C
	}
	for i, st := range sts {
		for k, v := range st.Drops {
			if strings.HasPrefix(k, "repel/") && v > 0 {
				t.Errorf("peer %d dropped repel messages between honest peers: %v", i, st.Drops)
			}
		}
	}
}

func TestRun_RepelBadFlagsAreUsageErrors(t *testing.T) {
	key := filepath.Join(t.TempDir(), "never-made.key")
	base := []string{"run", "--key", key, "--listen", "/ip4/127.0.0.1/tcp/0", "--method", "repel"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--force", "nonsense"}, `--force "nonsense": want repulsion or attract`},
		{[]string{"--settle", "0s"}, "--settle 0s must be positive"},
		{[]string{"--announce", "-1s"}, "--announce -1s must be positive"},
		{[]string{"--dead", "10s", "--announce", "5s"}, "--dead 10s must exceed 2 × --announce (5s)"},
		{[]string{"--ttl", "2s"}, "--ttl 2s: with --method repel"},
		{[]string{"--vivaldi-interval", "0s"}, "--vivaldi-interval"},
		{[]string{"--rtt", "kernel"}, "--rtt"},
		{[]string{"--superpeers", "0"}, "--superpeers 0"},
		{[]string{"--id-puzzle", "4"}, "--id-puzzle and --salt need --method prefix"},
		{[]string{"--salt", "00"}, "--id-puzzle and --salt need --method prefix"},
		{[]string{"--method", "prefix", "--salt", "xyz"}, `--salt "xyz": want 64 hex digits`},
		{[]string{"--method", "prefix", "--salt", "00"}, `want 64 hex digits`},
		{[]string{"--method", "prefix", "--id-puzzle", "30"}, "--id-puzzle 30 not in [0, 24]"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		args := append(append([]string(nil), base...), c.args...)
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		if got := strings.TrimRight(errb.String(), "\n"); strings.Contains(got, "\n") || !strings.HasPrefix(got, "peer run: ") || !strings.Contains(got, c.want) {
			t.Errorf("%v: stderr %q, want one line 'peer run: ...%s...'", c.args, got, c.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run", "--method", "bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "want prefix, repel") || !strings.Contains(errb.String(), "or none") {
		t.Errorf("--method bogus: exit %d, stderr %q", code, errb.String())
	}
}
