package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

var screenshot = flag.String("web.screenshot", "", "TestWeb_SwarmMapInChromium: also save the page's screenshot to this file (the README's is experiments/figures/web/swarm.png)")

// chromium is the path of a Chromium or Chrome binary, or "".
func chromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestWeb_SwarmMapInChromium: `peer swarm --web` on 100 peers, driven by
// headless Chromium: the page shows the 100 peers and the S superpeers,
// a click kills a superpeer, and the page shows S superpeers again once
// the prefix method has put the group's next peer in its place.
func TestWeb_SwarmMapInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no chromium binary found (Debian: apt-get install chromium; .ci/run installs it): the live map is tested in a real browser")
	}
	const n, S = 100, 4
	p := startCommand(t, "swarm", "--n", fmt.Sprint(n), "--method", "prefix", "--superpeers", fmt.Sprint(S), "--seed", "3",
		"--lookups", "20", "--vivaldi-bound", "0.3", "--timeout", "3m", "--web", "127.0.0.1:0")
	line := p.waitLine(t, 60*time.Second, "web map on http://")
	page := line[strings.Index(line, "http://"):]

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("chromium %s: %v", bin, err)
	}
	wait := func(what, cond string, timeout time.Duration) {
		t.Helper()
		start := time.Now()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(timeout))); err != nil {
			state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(document.body.dataset)`))
			t.Fatalf("the page did not show %s within %v: %v (body data %s)", what, timeout, err, state)
		}
		t.Logf("page shows %s after %.1f s", what, time.Since(start).Seconds())
	}
	data := `document.body.dataset`
	wait(fmt.Sprintf("%d peers and %d superpeers", n, S), fmt.Sprintf(`%s.peers === "%d" && %s.superpeers === "%d"`, data, n, data, S), 2*time.Minute)
	wait("the swarm ready to be driven", data+`.ready === "true" && !document.getElementById("kill-superpeer").disabled`, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("kill-superpeer"))); err != nil {
		t.Fatal(err)
	}
	wait("the kill", fmt.Sprintf(`%s.killed === "1" && %s.peers === "%d" && snap.events.some(e => e.kind === "kill" && e.superpeers === 1)`, data, data, n-1), 30*time.Second)
	victim, err := chromedp.Run(ctx, chromedp.Evaluate[int](`snap.events.find(e => e.kind === "kill").peers[0]`))
	if err != nil {
		t.Fatal(err)
	}
	wait(fmt.Sprintf("%d superpeers again, none of them the dead peer %d", S, victim),
		fmt.Sprintf(`%s.superpeers === "%d" && snap.peers.find(p => p.i === %d).role === "dead" && snap.groups.every(g => g.sp >= 0 && g.sp === g.expected)`, data, S, victim), 90*time.Second)
	// The map draws: the coordinate canvas has coloured pixels.
	painted, err := chromedp.Run(ctx, chromedp.Evaluate[int](`(() => {
		const c = document.getElementById("coords"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && !(d[i] === d[i + 1] && d[i + 1] === d[i + 2])) n++;
		return n; })()`))
	if err != nil || painted < 500 {
		t.Errorf("the coordinate canvas has %d coloured pixels (%v)", painted, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "swarm.png")
	if *screenshot != "" {
		out = *screenshot
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", out, len(png))
}

// sseFrames reads the event stream at url and sends every snapshot frame
// decoded, until ctx ends.
func sseFrames(ctx context.Context, t *testing.T, url string) <-chan frame {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: content type %q", ct)
	}
	out := make(chan frame, 16)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		// An event is dispatched at the blank line that ends it, as a
		// browser does: a line cut short when ctx ends (the scanner hands
		// back the partial last line) is never decoded.
		event, data := "", ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data += strings.TrimPrefix(line, "data: ")
			case line == "":
				ev, d := event, data
				event, data = "", ""
				if ev != "snapshot" {
					continue
				}
				var f frame
				if err := json.Unmarshal([]byte(d), &f); err != nil {
					t.Errorf("a snapshot that does not decode: %v", err)
					return
				}
				select {
				case out <- f:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// next is the first frame for which ok holds.
func next(t *testing.T, frames <-chan frame, timeout time.Duration, what string, ok func(frame) bool) frame {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, open := <-frames:
			if !open {
				t.Fatalf("the stream ended before %s", what)
			}
			if ok(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("no frame with %s within %v", what, timeout)
		}
	}
}

func postForm(t *testing.T, u string, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("%s %v: answer %q is not JSON", u, form, b)
	}
	return resp.StatusCode, body
}

// TestWeb_EventStreamCarriesWhatThePageDraws: the event stream of a
// 40-peer prefix swarm, decoded as the page decodes it, carries every
// peer with the swarm's own role and superpeer, each superpeer's load,
// each group's superpeer and the figures; kills and pauses are validated
// (a bad fraction is a 400 saying why) and show in the stream; nobody
// listening, no snapshot is taken.
func TestWeb_EventStreamCarriesWhatThePageDraws(t *testing.T) {
	const n, S, C = 40, 4, 20
	m, err := latency.Builtin(latency.Default)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := latency.Place(m.Filled(), n, 9)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := swarm.New(ctx, swarm.Config{N: n, Seed: 9, RTT: pl, HostOf: pl.Host})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConverged(ctx, 10); err != nil {
		t.Fatal(err)
	}
	vr, err := s.StartVivaldi(swarm.VivaldiOptions{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer vr.Close()
	view := swarm.NewView(s)
	view.SetVivaldi(vr)
	var taken atomic.Int64
	srv, err := startMap("127.0.0.1:0", func() swarm.Snapshot { taken.Add(1); return view.Snapshot() }, view)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := s.StartPrefix(ctx, superpeer.WithSuperpeers(S), superpeer.WithCapacity(C), superpeer.WithTTL(3*time.Second), superpeer.WithMinRecheck(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	defer s.StopMethod()
	view.WatchActive()
	if _, err := s.WaitPrefix(ctx, s.SelectionStart()); err != nil {
		t.Fatal(err)
	}

	sctx, stopStream := context.WithCancel(ctx)
	frames := sseFrames(sctx, t, srv.URL()+"events")
	f := next(t, frames, 10*time.Second, "a snapshot", func(frame) bool { return true })
	st := s.PrefixState()
	if !st.Converged() {
		t.Skip("the selection moved between convergence and the snapshot")
	}
	if f.Mode != "swarm" || f.Method != "prefix" || f.N != n || f.Live != n || f.Target != S || f.Capacity != C || f.Superpeers != len(st.Superpeers) || f.Paused || f.Ready {
		t.Fatalf("frame: mode %q method %q n %d live %d target %d capacity %d superpeers %d (swarm %d) paused %v ready %v",
			f.Mode, f.Method, f.N, f.Live, f.Target, f.Capacity, f.Superpeers, len(st.Superpeers), f.Paused, f.Ready)
	}
	if len(f.Peers) != n {
		t.Fatalf("%d peers in the frame, want %d", len(f.Peers), n)
	}
	scheme := s.Selector(st.Superpeers[0]).Scheme()
	for _, p := range f.Peers {
		role := "client"
		if st.Assignment[p.I] == p.I {
			role = "superpeer"
		}
		if p.SP != st.Assignment[p.I] || p.Role != role || !p.Pos || p.G != scheme.Group(s.Peers[p.I].Key) || !strings.HasSuffix(s.Peers[p.I].Host.ID().String(), p.ID) {
			t.Errorf("peer %d drawn %+v; the swarm says superpeer %d", p.I, p, st.Assignment[p.I])
		}
	}
	loads := map[int]int{}
	for _, l := range f.Loads {
		loads[l.SP] = l.Load
	}
	for _, i := range st.Superpeers {
		if got, ok := loads[i]; !ok || got != s.Selector(i).Attach().Load() {
			t.Errorf("superpeer %d: load %d drawn (%v), %d in the swarm", i, got, ok, s.Selector(i).Attach().Load())
		}
	}
	expected := s.ExpectedSuperpeers(scheme)
	if len(f.Groups) != S {
		t.Fatalf("%d groups drawn, want %d", len(f.Groups), S)
	}
	for _, g := range f.Groups {
		if g.SP != expected[g.G] || g.Share != scheme.Share(g.G) {
			t.Errorf("group %+v; the swarm's superpeer %d", g, expected[g.G])
		}
	}
	if fig := f.Figures; fig.ClientRTT <= 0 || fig.RandomRTT <= 0 || fig.KMedianRTT <= 0 || fig.Served != n-S || fig.VivaldiMedian <= 0 {
		t.Errorf("figures %+v", fig)
	}
	f2 := next(t, frames, 10*time.Second, "a second snapshot", func(g frame) bool { return g.Seq > f.Seq })
	if f2.Figures.MsgsPerPeerSec <= 0 {
		t.Errorf("messages per peer per second %v", f2.Figures.MsgsPerPeerSec)
	}

	// Kills: validated, refused until the swarm is ready, then in the stream.
	kill := srv.URL() + "api/kill"
	code, body := postForm(t, kill, url.Values{"superpeer": {"any"}})
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(body["error"]), "converging") {
		t.Errorf("kill before ready: %d %v", code, body)
	}
	view.SetReady()
	for _, c := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"fraction": {"abc"}}, "between 0 and 1"},
		{url.Values{"fraction": {"1.5"}}, "between 0 and 1"},
		{url.Values{"fraction": {"0"}}, "between 0 and 1"},
		{url.Values{"fraction": {"NaN"}}, "between 0 and 1"},
		{url.Values{"fraction": {"0.001"}}, "is nobody"},
		{url.Values{"peer": {"x"}}, "index"},
		{url.Values{"peer": {"999"}}, "not a live peer"},
		{url.Values{"superpeer": {"3"}}, "want any"},
		{url.Values{"peer": {"1"}, "fraction": {"0.1"}}, "exactly one"},
		{url.Values{}, "exactly one"},
	} {
		code, body := postForm(t, kill, c.form)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["error"]), c.want) {
			t.Errorf("kill %v: %d %v, want 400 saying %q", c.form, code, body, c.want)
		}
	}
	if resp, err := http.Get(kill); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET kill: %v %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}
	code, body = postForm(t, kill, url.Values{"superpeer": {"any"}})
	if code != http.StatusOK || body["superpeers"] != 1.0 {
		t.Fatalf("kill a superpeer: %d %v", code, body)
	}
	victim := int(body["killed"].([]any)[0].(float64))
	f3 := next(t, frames, 10*time.Second, "the kill", func(g frame) bool { return g.Killed == 1 })
	if f3.Live != n-1 || f3.Peers[victim].Role != "dead" || !f3.Ready {
		t.Errorf("after the kill: live %d, victim %d %s, ready %v", f3.Live, victim, f3.Peers[victim].Role, f3.Ready)
	}
	found := false
	for _, e := range f3.Events {
		found = found || e.Kind == "kill" && len(e.Peers) == 1 && e.Peers[0] == victim && e.Superpeers == 1
	}
	if !found {
		t.Errorf("no kill event for %d in %+v", victim, f3.Events)
	}
	code, body = postForm(t, kill, url.Values{"fraction": {"0.1"}})
	if code != http.StatusOK || len(body["killed"].([]any)) != 4 {
		t.Errorf("kill a tenth of 39: %d %v", code, body)
	}
	next(t, frames, 10*time.Second, "the second kill", func(g frame) bool { return g.Killed == 5 && g.Live == n-5 })

	// Pause: validated, and in the stream.
	if code, body := postForm(t, srv.URL()+"api/pause", url.Values{"paused": {"maybe"}}); code != http.StatusBadRequest {
		t.Errorf("pause maybe: %d %v", code, body)
	}
	if code, body := postForm(t, srv.URL()+"api/pause", url.Values{"paused": {"true"}}); code != http.StatusOK || body["paused"] != true {
		t.Errorf("pause: %d %v", code, body)
	}
	next(t, frames, 10*time.Second, "paused", func(g frame) bool { return g.Paused })
	if code, _ := postForm(t, srv.URL()+"api/pause", nil); code != http.StatusOK {
		t.Errorf("toggle: %d", code)
	}
	next(t, frames, 10*time.Second, "running again", func(g frame) bool { return !g.Paused })

	// Nobody listening: no snapshots.
	stopStream()
	for range frames {
	}
	time.Sleep(200 * time.Millisecond) // the server notices the closed stream
	before := taken.Load()
	time.Sleep(3 * webInterval)
	if after := taken.Load(); after != before {
		t.Errorf("%d snapshots taken with nobody listening", after-before)
	}
}

// TestWeb_PageIsEmbedded: the page and its script and style are served
// from the binary, and name nothing outside it.
func TestWeb_PageIsEmbedded(t *testing.T) {
	srv, err := startMap("127.0.0.1:0", func() swarm.Snapshot { return swarm.Snapshot{Mode: "swarm"} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, path := range []string{"", "app.js", "style.css"} {
		b, err := httpGet(srv.URL() + path)
		if err != nil || len(b) < 500 {
			t.Fatalf("%q: %d bytes, %v", path, len(b), err)
		}
		if s := string(b); strings.Contains(s, "http://") || strings.Contains(s, "https://") || strings.Contains(s, "//cdn") {
			t.Errorf("%q names something outside the binary", path)
		}
	}
	if code, body := postForm(t, srv.URL()+"api/kill", url.Values{"superpeer": {"any"}}); code != http.StatusNotFound {
		t.Errorf("kill on a map without a swarm: %d %v", code, body)
	}
	var f frame
	b, err := httpGet(srv.URL() + "api/snapshot")
	if err != nil || json.Unmarshal(b, &f) != nil || f.Mode != "swarm" || f.Seq != 1 {
		t.Errorf("snapshot %s: %v", b, err)
	}
	if _, err := startMap("nowhere:port", nil, nil); err == nil || !strings.Contains(err.Error(), "--web") {
		t.Errorf("a bad address: %v", err)
	}
}

// TestWeb_PeerRunMap: `peer run --web` serves one peer's own view: itself
// first, the other peer from its routing table, its role and superpeer as
// the prefix method settles them (one superpeer for two).
func TestWeb_PeerRunMap(t *testing.T) {
	dir := t.TempDir()
	common := []string{"--listen", "/ip4/127.0.0.1/tcp/0", "--refresh", "2s", "--method", "prefix", "--superpeers", "1", "--ttl", "1500ms"}
	p1 := startPeer(t, append(common, "--key", filepath.Join(dir, "k1"))...)
	line := p1.waitLine(t, 30*time.Second, "listening on /ip4/127.0.0.1/tcp/")
	addr1 := line[strings.Index(line, "/ip4/"):]
	p2 := startPeer(t, append(common, "--key", filepath.Join(dir, "k2"), "--bootstrap", addr1, "--web", "127.0.0.1:0")...)
	l := p2.waitLine(t, 30*time.Second, "web map on http://")
	page := l[strings.Index(l, "http://"):]
	p2.waitLine(t, 60*time.Second, "role ")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := httpGet(page + "api/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("snapshot %s: %v", b, err)
		}
		if f.Mode == "peer" && f.Method == "prefix" && len(f.Peers) == 2 && f.Superpeers == 1 && len(f.Groups) == 1 &&
			(f.Peers[0].Role == "superpeer" && f.Peers[0].SP == 0 || f.Peers[0].Role == "client" && f.Peers[0].SP == 1 && f.Peers[1].Role == "superpeer") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer's map never showed two peers and one superpeer: %s", b)
		}
		time.Sleep(200 * time.Millisecond) // polling the condition
	}
	b, err := httpGet(page)
	if err != nil || !strings.Contains(string(b), "app.js") {
		t.Errorf("the page: %v", err)
	}
	if resp, err := http.PostForm(page+"api/kill", url.Values{"superpeer": {"any"}}); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("kill on one peer's map: %v %v", resp.Status, err)
	} else {
		resp.Body.Close()
	}
}
