package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// TestRun_ServesMetrics runs one `peer run --method repel --metrics` on
// loopback until it mints and settles the one token, and scrapes it: every
// component's superpeer_* metrics are there, with the Go runtime's and the
// process's.
func TestRun_ServesMetrics(t *testing.T) {
	p := startPeer(t, "--listen", "/ip4/127.0.0.1/tcp/0", "--key", filepath.Join(t.TempDir(), "k"),
		"--metrics", "127.0.0.1:0", "--method", "repel", "--superpeers", "1", "--ttl", "10s",
		"--settle", "1s", "--dead", "3s", "--announce", "1s", "--vivaldi-interval", "200ms")
	l := p.waitLine(t, 30*time.Second, "metrics on http://")
	url := l[strings.Index(l, "http://"):]
	if !strings.HasSuffix(url, metricsPath) {
		t.Fatalf("metrics logged at %s, want the path %s", url, metricsPath)
	}
	p.waitLine(t, 30*time.Second, "role superpeer")
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := httpGet(url)
		if err != nil {
			t.Fatal(err)
		}
		body = string(b)
		if strings.Contains(body, `superpeer_selector_role{role="superpeer"} 1`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{
		`superpeer_selector_role{role="superpeer"} 1`,
		`superpeer_repel_tokens_held 1`,
		`superpeer_repel_token_events_total{event="minted"} 1`,
		`superpeer_repel_token_events_total{event="settled"} 1`,
		`superpeer_attach_clients 0`,
		`superpeer_attach_capacity 64`,
		`superpeer_dht_lookups_total `,
		`superpeer_vivaldi_error_ratio `,
		`superpeer_vivaldi_drops_total{reason="decode"} 0`,
		`# TYPE superpeer_dht_drops_total counter`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

func TestRun_MetricsBadAddressIsAnError(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"run", "--listen", "/ip4/127.0.0.1/tcp/0", "--key", filepath.Join(t.TempDir(), "k"), "--metrics", "127.0.0.1:notaport"}
	if code := run(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "peer run: --metrics 127.0.0.1:notaport") {
		t.Errorf("exit %d, stderr %q; want 1 and a --metrics error", code, errb.String())
	}
}

// TestDashboard_QueriesRegisteredMetrics parses dashboards/superpeer.json
// and checks that every superpeer_* metric it queries is one the peer's
// components register (all of them on one registry, as `peer run
// --metrics` has them).
func TestDashboard_QueriesRegisteredMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "dashboards", "superpeer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	panels, _ := dash["panels"].([]any)
	if len(panels) < 4 {
		t.Fatalf("dashboard has %d panels", len(panels))
	}
	var queries []string
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				walk(k, y)
			}
		case []any:
			for _, y := range x {
				walk(key, y)
			}
		case string:
			if key == "expr" || key == "query" || key == "definition" {
				queries = append(queries, x)
			}
		}
	}
	for i, p := range panels {
		targets, _ := p.(map[string]any)["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %d has no targets", i)
		}
	}
	walk("", dash)

	registered := registeredMetrics(t)
	name := regexp.MustCompile(`\bsuperpeer_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, q := range queries {
		for _, m := range name.FindAllString(q, -1) {
			used[m] = true
			if !registered[m] {
				t.Errorf("the dashboard queries %s (in %q), which no component registers", m, q)
			}
		}
	}
	if len(used) < 8 {
		t.Errorf("the dashboard queries only %d superpeer_ metrics: %v", len(used), used)
	}
	var unused []string
	for m := range registered {
		if strings.HasPrefix(m, "superpeer_") && !used[m] {
			unused = append(unused, m)
		}
	}
	sort.Strings(unused)
	t.Logf("registered but not on the dashboard: %v", unused)
}

// registeredMetrics are the names gathered from one peer's components
// (DHT node, Vivaldi service, repel selector with its attach protocol) on
// the registry `peer run --metrics` makes: every family reports at least
// one series from the start.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mn := mocknet.New()
	defer mn.Close()
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	reg := newMetricsRegistry()
	node, err := dht.New(ctx, h, dht.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	viv, err := vivaldi.NewService(h, vivaldi.WithInterval(0), vivaldi.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer viv.Close()
	cfg := repel.LocalConfig()
	cfg.Tokens = 1
	sel, err := repel.NewSelector(node, repel.WithVivaldi(viv), repel.WithConfig(cfg), repel.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	for _, want := range []string{"superpeer_dht_lookups_total", "superpeer_vivaldi_error_ratio", "superpeer_attach_clients", "superpeer_repel_tokens_held", "superpeer_selector_role", "go_goroutines"} {
		if !out[want] {
			t.Fatalf("%s not registered; gathered %v", want, out)
		}
	}
	return out
}
