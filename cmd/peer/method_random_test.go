package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// This file adds a third selection method, "random", and nothing else: a
// registration with the library (the live selector) and one with the
// simulator. The tests below run it through `peer swarm` and `peer sim`,
// which know nothing of it.
//
// The method: a peer is a superpeer iff its key, read as a fraction of the
// key space, is below S/n (n the DHT's size estimate), so that each peer is
// one with probability S/n; a client asks the peers of its routing table in
// a random order until one accepts it, and renews there every third of the
// attach TTL.

func init() {
	superpeer.Register(superpeer.Method{Name: "random", Summary: "each peer a superpeer with probability S/n (a test's method)", New: newRandom})
	sim.Register(sim.Method{Name: "random", Simulate: func(env sim.Env) (sim.Outcome, error) {
		var sps []int
		for i, k := range env.Keys {
			if isRandomSuperpeer(k, env.Superpeers, len(env.Keys)) {
				sps = append(sps, i)
			}
		}
		a := metrics.AssignWithCapacity(env.RTT, sps, env.Capacity)
		return sim.Outcome{Superpeers: sps, Assignment: a}, nil
	}})
}

func isRandomSuperpeer(k dht.Key, S, n int) bool {
	return float64(binary.BigEndian.Uint64(k[:8]))/math.Exp2(64) < float64(S)/float64(n)
}

type randomSel struct {
	node   *dht.Node
	S      int
	att    *superpeer.Attach
	note   superpeer.Notifier
	rng    *rand.Rand
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRandom(node *dht.Node, env superpeer.Env) (superpeer.Selector, error) {
	att, err := superpeer.NewAttach(node.Host(), append([]superpeer.Option{superpeer.WithProtocolPrefix(node.ProtocolPrefix()), superpeer.WithRegisterer(env.Registerer)}, env.Attach...)...)
	if err != nil {
		return nil, err
	}
	s := &randomSel{node: node, S: max(env.Superpeers, 1), att: att, rng: rand.New(rand.NewSource(int64(env.Seed)))}
	att.SetRole(s.note.State)
	return s, nil
}

func (s *randomSel) Start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(ctx)
	if isRandomSuperpeer(s.node.Key(), s.S, s.node.NetworkSize()) {
		s.note.Set(superpeer.Superpeer, s.node.ID(), "drawn", time.Now())
		return nil
	}
	s.note.Set(superpeer.Client, "", "drawn", time.Now())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(s.att.TTL() / 3)
		defer tick.Stop()
		for {
			s.attach(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return nil
}

// attach renews at the current superpeer, or asks the routing table's peers
// in a random order until one accepts.
func (s *randomSel) attach(ctx context.Context) {
	if sp := s.Superpeer(); sp != "" {
		if a, err := s.att.Request(ctx, sp, false, nil, 0); err == nil && a.Status == superpeer.Accepted {
			return
		}
	}
	ps := s.node.RoutingTable().ListPeers()
	s.rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	for _, p := range ps {
		if a, err := s.att.Request(ctx, p, false, nil, 0); err == nil && a.Status == superpeer.Accepted {
			s.note.Set(superpeer.Client, p, "accepted", time.Now())
			return
		}
	}
	s.note.Set(superpeer.Client, "", "nobody accepted", time.Now())
}

func (s *randomSel) Role() superpeer.Role                         { r, _ := s.note.State(); return r }
func (s *randomSel) Superpeer() peer.ID                           { _, sp := s.note.State(); return sp }
func (s *randomSel) Subscribe() (<-chan superpeer.Change, func()) { return s.note.Subscribe() }
func (s *randomSel) Attach() *superpeer.Attach                    { return s.att }
func (s *randomSel) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.att.Close()
	return nil
}

// checkMethodReport checks one method's block of a report: every live peer
// is a superpeer or attached to one.
func checkMethodReport(t *testing.T, m *methodReport, n int) {
	t.Helper()
	if m.Superpeers == nil || m.Superpeers.Count < 1 || len(m.SuperpeerOf) != n {
		t.Fatalf("%s: report %+v", m.Method, m)
	}
	count := 0
	for i, j := range m.SuperpeerOf {
		switch {
		case j == i:
			count++
		case j < 0 || j >= n || m.SuperpeerOf[j] != j:
			t.Errorf("%s: peer %d served by %d, not a superpeer", m.Method, i, j)
		}
	}
	if count != m.Superpeers.Count || m.Superpeers.Unserved != 0 {
		t.Errorf("%s: %d superpeers in superpeer_of, %d in the summary; %d unserved", m.Method, count, m.Superpeers.Count, m.Superpeers.Unserved)
	}
}

func TestMethod_RandomRunsThroughSwarmAndSim(t *testing.T) {
	const n, S = 30, 4
	dir := t.TempDir()
	path := filepath.Join(dir, "swarm.json")
	var out, errb bytes.Buffer
	if code := run([]string{"swarm", "--method", "random", "--n", "30", "--superpeers", "4", "--seed", "3", "--latency", "synthetic",
		"--lookups", "5", "--vivaldi=false", "--ttl", "1s", "--json", path}, &out, &errb); code != 0 {
		t.Fatalf("swarm: exit %d: %s", code, errb.String())
	}
	var rep swarmReport
	readJSON(t, path, &rep)
	if len(rep.Methods) != 1 || rep.Methods[0].Method != "random" {
		t.Fatalf("swarm report methods %+v, want random alone", rep.Methods)
	}
	checkMethodReport(t, rep.Methods[0], n)

	path = filepath.Join(dir, "sim.json")
	out.Reset()
	if code := run([]string{"sim", "--method", "random,prefix", "--n", "30", "--superpeers", "4", "--seed", "3", "--latency", "synthetic", "--json", path}, &out, &errb); code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errb.String())
	}
	var sr simReport
	readJSON(t, path, &sr)
	if len(sr.Methods) != 2 || sr.Methods[0].Method != "random" || sr.Methods[1].Method != "prefix" {
		t.Fatalf("sim report methods %+v, want random then prefix", sr.Methods)
	}
	_, keys, err := sim.Identities(3, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, k := range keys {
		if isRandomSuperpeer(k, S, n) {
			want++
		}
	}
	for _, m := range sr.Methods {
		checkMethodReport(t, m, n)
	}
	if got := sr.Methods[0].Superpeers.Count; got != want {
		t.Errorf("simulated random: %d superpeers, the rule gives %d", got, want)
	}
	if got := sr.Methods[1].Superpeers.Count; got != S {
		t.Errorf("simulated prefix: %d superpeers, want %d", got, S)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
