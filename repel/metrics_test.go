package repel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/internal/counters"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// TestMetrics_RegisteredOnlyWhenAsked: four selectors on one registry
// settle one token; the registry shows one holder, one superpeer and three
// clients attached, the token's events and a refused frame by reason. A
// fifth peer's selector without a Registerer registers nothing.
func TestMetrics_RegisteredOnlyWhenAsked(t *testing.T) {
	cfg := LocalConfig()
	cfg.Tokens = 1
	ps := selectorNet(t, 5, 0, cfg)
	reg := prometheus.NewPedanticRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var sels []*Selector
	for i := range 5 {
		opts := []Option{WithConfig(cfg), WithAttach(superpeer.WithTTL(2 * time.Second)), WithSeed(uint64(i + 1)), WithVivaldi(ps.vivs[i])}
		if i < 4 {
			opts = append(opts, WithRegisterer(reg))
		}
		sel, err := NewSelector(ps.nodes[i], opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := sel.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sel.Close() })
		sels = append(sels, sel)
	}
	waitUntil(t, 30*time.Second, "one superpeer serving the other four", func() bool {
		sp := -1
		for i, s := range sels {
			if s.Role() == superpeer.Superpeer {
				if sp >= 0 {
					return false
				}
				sp = i
			}
		}
		if sp < 0 {
			return false
		}
		for _, s := range sels {
			if s.Superpeer() != sels[sp].node.ID() {
				return false
			}
		}
		return sels[sp].Attach().Load() == 4
	})
	sendRaw(t, ps.hosts[4], ps.hosts[0].ID(), []byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff})
	waitUntil(t, 5*time.Second, "the bad frame counted", func() bool { return sels[0].Drops()[dropDecode] == 1 })

	// Counters only grow: what Stats said before the scrape is a floor.
	var minted, lookups float64
	for _, s := range sels[:4] {
		minted += float64(s.Stats()[EventMinted.String()])
		lookups += float64(s.Stats()[statLookups])
	}
	// The state may move on between two reads (a token move, a survey):
	// scrape until one scrape shows the settled state, all at once.
	var got map[string]map[string]float64
	settled := func() string {
		var err error
		if got, err = counters.Values(reg); err != nil {
			t.Fatal(err)
		}
		// Whether the fifth peer (not registered) holds the token
		// decides what the four on the registry show.
		_, fifthHolds := sels[4].Held()
		held, superpeers, clients, served := 1.0, 1.0, 3.0, 4.0
		if fifthHolds {
			held, superpeers, clients, served = 0, 0, 4, 0
		}
		for _, c := range []struct {
			name, label string
			want        float64
		}{
			{"superpeer_repel_tokens_held", "", held},
			{"superpeer_repel_tokens_known", "", 1},
			{"superpeer_selector_role", "superpeer", superpeers},
			{"superpeer_selector_role", "client", clients},
			{"superpeer_selector_role", "unknown", 0},
			{"superpeer_attach_clients", "", served},
			{"superpeer_repel_drops_total", dropDecode, 1},
			{"superpeer_repel_drops_total", dropSignature, 0},
			{"superpeer_repel_drops_total", dropCert, 0},
		} {
			if g, ok := got[c.name][c.label]; !ok || g != c.want {
				return fmt.Sprintf("%s{%q} = %v (present %v), want %v", c.name, c.label, g, ok, c.want)
			}
		}
		return ""
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		why := settled()
		if why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of the settled state within 10 s: %s", why)
		}
	}
	if g := got["superpeer_repel_token_events_total"][EventMinted.String()]; g < minted || g+float64(sels[4].Stats()[EventMinted.String()]) < 1 {
		t.Errorf("minted events %v, the selectors' Stats said %v before", g, minted)
	}
	if n := len(got["superpeer_repel_token_events_total"]); n != int(lastEvent) {
		t.Errorf("%d token event series, want one per EventKind (%d)", n, lastEvent)
	}
	// Which peers look token names up depends on who minted: the five
	// together looked up at least once.
	if g := got["superpeer_repel_token_lookups_total"][""]; g < lookups || g+float64(sels[4].Stats()[statLookups]) < 1 {
		t.Errorf("token lookups %v, the selectors' Stats said %v before", g, lookups)
	}
	if g := got["superpeer_repel_sent_bytes_total"]["gossip"]; g == 0 {
		t.Error("no gossip bytes sent")
	}

	if names, err := counters.Named(prometheus.DefaultGatherer, "superpeer_"); err != nil || len(names) > 0 {
		t.Errorf("registered on the default registry without a Registerer: %v (%v)", names, err)
	}
	for _, s := range sels {
		s.Close()
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after Close: %d families (%v), want none", len(mfs), err)
	}
}
