//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	mrand "math/rand"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/testbed"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// natPuzzle is the ID puzzle of a bed with NAT'd peers: every peer runs
// `--id-puzzle natPuzzle`, the public peers' identities solve it and the
// NAT'd peers' do not, so that no NAT'd peer is a superpeer (S/Kademlia's
// static puzzle as the eligibility rule the prefix method already has).
const natPuzzle = 3

// natBoot is how many of the first peers stay public: everyone
// bootstraps through them.
const natBoot = 8

// natPeers chooses round(frac·n) peers behind NAT among those past the
// first natBoot, by the seed.
func natPeers(n int, frac float64, rng *mrand.Rand) []bool {
	nat := make([]bool, n)
	k := min(int(math.Round(frac*float64(n))), max(n-natBoot, 0))
	if k <= 0 {
		return nil
	}
	for _, j := range rng.Perm(n - natBoot)[:k] {
		nat[natBoot+j] = true
	}
	return nat
}

// relayReport is `peer testbed --nat`'s relay block: how the NAT'd peers
// got relays and what a relayed path between two of them costs.
type relayReport struct {
	Mode     string `json:"mode"`
	NATPeers int    `json:"nat_peers"`
	// HeldSeconds is from the selection's convergence until every live
	// NAT'd peer held a relay reservation (and so a /p2p-circuit
	// address); WithOwnSuperpeer, how many of them hold one with their own
	// superpeer then.
	HeldSeconds      float64 `json:"held_seconds"`
	WithOwnSuperpeer int     `json:"with_own_superpeer"`
	// RelaysPerPeer is the mean number of relays a NAT'd peer holds.
	RelaysPerPeer float64 `json:"relays_per_peer"`
	// Pairs are the NAT'd pairs pinged (a to b over b's relays), each
	// over distinct peers' relayed paths.
	Pairs []relayPair `json:"pairs"`
	// Pinged counts the pairs whose ping came back; ViaSuperpeer, those
	// relayed by b's own superpeer.
	Pinged       int `json:"pinged"`
	ViaSuperpeer int `json:"via_superpeer"`
	// Medians over the pinged pairs: the relayed RTT measured, the
	// matrix's RTT through the relay used (a→r→b), through the best
	// relay any public peer could be, and the direct RTT a NAT forbids.
	MeasuredMs  float64 `json:"measured_ms_median"`
	ViaMatrixMs float64 `json:"via_matrix_ms_median"`
	BestMs      float64 `json:"best_ms_median"`
	DirectMs    float64 `json:"direct_ms_median"`
	// RatioBest is measured / best per pair: median and p90.
	RatioBest [2]float64 `json:"ratio_best"`
	// Load is every relay's: the NAT'd peers holding it, and its own count
	// against its capacity. LoadMax is the most NAT'd peers on one relay.
	Load    []relayLoad `json:"load"`
	LoadMax int         `json:"load_max"`
	// Over counts relays holding more reservations than their capacity.
	Over int `json:"over_capacity"`
}

type relayPair struct {
	A, B      int       `json:"-"`
	From      int       `json:"from"`
	To        int       `json:"to"`
	Via       int       `json:"via"`
	RTTms     []float64 `json:"rtt_ms,omitempty"`
	Measured  float64   `json:"measured_ms"`
	ViaMatrix float64   `json:"via_matrix_ms"`
	Best      float64   `json:"best_ms"`
	Direct    float64   `json:"direct_ms"`
	Error     string    `json:"error,omitempty"`
}

// relayLoad is one relay's load: the NAT'd peers that say they hold a
// reservation with it, and with the superpeer mode its own count of
// reservations (-1: not reported) against its capacity.
type relayLoad struct {
	Peer         int  `json:"peer"`
	Superpeer    bool `json:"superpeer"`
	Clients      int  `json:"clients"`
	Reservations int  `json:"reservations"`
	Capacity     int  `json:"capacity"`
}

// relayPhase waits until every live NAT'd peer holds a relay, pings
// --relay-pairs pairs of NAT'd peers over their relayed paths, and reads
// every relay's load.
func (tb *bedRun) relayPhase(ctx context.Context, conv time.Time) (*relayReport, error) {
	rr := &relayReport{Mode: tb.f.relay}
	var nat []int
	for i, b := range tb.f.nat {
		if b && tb.view.Live[i] {
			nat = append(nat, i)
		}
	}
	rr.NATPeers = len(nat)
	idx := make(map[string]int, len(tb.view.IDs))
	for i, id := range tb.view.IDs {
		idx[id] = i
	}
	if _, err := tb.wait(ctx, "relays", func(v testbed.View) (bool, string) {
		held, own := 0, 0
		for _, i := range nat {
			s := v.Status[i]
			if s == nil || s.Relay == nil || len(s.Relay.Held) == 0 || len(circuitAddrs(s.Addrs)) == 0 {
				continue
			}
			held++
			for _, r := range s.Relay.Held {
				if r == s.Superpeer {
					own++
				}
			}
		}
		rr.WithOwnSuperpeer = own
		return held == len(nat), fmt.Sprintf("%d of %d NAT'd peers hold a relay, %d with their own superpeer", held, len(nat), own)
	}, true); err != nil {
		return nil, err
	}
	rr.HeldSeconds = time.Since(conv).Seconds()
	tb.logf("relays: every NAT'd peer holds one %.1f s after the selection converged (%d with its own superpeer)", rr.HeldSeconds, rr.WithOwnSuperpeer)
	total := 0
	for _, i := range nat {
		total += len(tb.view.Status[i].Relay.Held)
	}
	rr.RelaysPerPeer = float64(total) / float64(max(len(nat), 1))

	// Distinct unordered pairs, each pinged one way: a second ping of the
	// same two would reuse the first's relayed connection.
	rng := tb.rng(7)
	want := min(tb.f.relayPairs, len(nat)*(len(nat)-1)/2)
	seen := map[[2]int]bool{}
	for len(rr.Pairs) < want {
		a, b := nat[rng.Intn(len(nat))], nat[rng.Intn(len(nat))]
		key := [2]int{min(a, b), max(a, b)}
		if a == b || seen[key] {
			continue
		}
		seen[key] = true
		rr.Pairs = append(rr.Pairs, relayPair{A: a, B: b, From: a, To: b, Via: -1})
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for k := range rr.Pairs {
		pr := &rr.Pairs[k]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			tb.pingPair(ctx, client, pr, idx)
		}()
	}
	wg.Wait()
	var meas, viaM, best, direct, ratio []float64
	for _, pr := range rr.Pairs {
		if pr.Error != "" {
			continue
		}
		rr.Pinged++
		if s := tb.view.Status[pr.B]; s != nil && pr.Via >= 0 && tb.view.IDs[pr.Via] == s.Superpeer {
			rr.ViaSuperpeer++
		}
		meas, viaM, best, direct = append(meas, pr.Measured), append(viaM, pr.ViaMatrix), append(best, pr.Best), append(direct, pr.Direct)
		if pr.Best > 0 {
			ratio = append(ratio, pr.Measured/pr.Best)
		}
	}
	rr.MeasuredMs, rr.ViaMatrixMs, rr.BestMs, rr.DirectMs = median(meas), median(viaM), median(best), median(direct)
	if len(ratio) > 0 {
		q := metrics.Percentiles(ratio, 0.5, 0.9)
		rr.RatioBest = [2]float64{q[0], q[1]}
	}

	// The load on every relay as its NAT'd clients report it (go-libp2p's
	// own relay service, the random mode's, reports nothing), beside a
	// superpeer relay's own count.
	tb.poll(ctx)
	byClients := map[int]int{}
	for _, i := range nat {
		if s := tb.view.Status[i]; s != nil && s.Relay != nil {
			for _, r := range s.Relay.Held {
				if j, ok := idx[r]; ok {
					byClients[j]++
				}
			}
		}
	}
	for i, s := range tb.view.Status {
		serving := s != nil && tb.view.Live[i] && s.Relay != nil && s.Relay.Serving != nil && s.Relay.Serving.Running
		if byClients[i] == 0 && !serving {
			continue
		}
		l := relayLoad{Peer: i, Superpeer: s != nil && s.Role == superpeer.Superpeer.String(), Clients: byClients[i], Reservations: -1, Capacity: tb.f.capacity}
		if serving {
			l.Reservations, l.Capacity = s.Relay.Serving.Reservations, s.Relay.Serving.Capacity
		}
		rr.Load = append(rr.Load, l)
		rr.LoadMax = max(rr.LoadMax, l.Clients)
		if l.Capacity > 0 && max(l.Clients, l.Reservations) > l.Capacity {
			rr.Over++
		}
	}
	tb.logf("relays: %d of %d pairs pinged, %d through the target's superpeer; relayed RTT median %.1f ms (matrix via that relay %.1f, best relay %.1f, direct %.1f); %.2f× the best relay (p90 %.2f×); most NAT'd peers on one relay %d",
		rr.Pinged, len(rr.Pairs), rr.ViaSuperpeer, rr.MeasuredMs, rr.ViaMatrixMs, rr.BestMs, rr.DirectMs, rr.RatioBest[0], rr.RatioBest[1], rr.LoadMax)
	return rr, nil
}

// pingPair asks peer A to ping peer B over B's /p2p-circuit addresses and
// fills the pair's figures beside the matrix's.
func (tb *bedRun) pingPair(ctx context.Context, client *http.Client, pr *relayPair, idx map[string]int) {
	s := tb.view.Status[pr.B]
	q := url.Values{"peer": {tb.view.IDs[pr.B]}, "count": {"5"}}
	for _, a := range circuitAddrs(s.Addrs) {
		q.Add("addr", a)
	}
	rtt := func(i, j int) float64 { return tb.pl.RTT(i, j) }
	pr.Direct = rtt(pr.A, pr.B)
	pr.Best = math.Inf(1)
	for r := range tb.view.IDs {
		if r != pr.A && r != pr.B && tb.view.Live[r] && tb.view.Eligible[r] {
			pr.Best = min(pr.Best, rtt(pr.A, r)+rtt(r, pr.B))
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tb.bed.StatusAddr(pr.A)+"/ping?"+q.Encode(), nil)
	if err != nil {
		pr.Error = err.Error()
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		pr.Error = err.Error()
		return
	}
	defer resp.Body.Close()
	var rep pingReply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		pr.Error = fmt.Sprintf("/ping: %s: %v", resp.Status, err)
		return
	}
	if rep.Error != "" || len(rep.RTTms) == 0 {
		pr.Error = fmt.Sprintf("/ping: %s: %s", resp.Status, rep.Error)
		return
	}
	pr.RTTms = rep.RTTms
	// The first ping may still pay for the relayed connection's setup:
	// the median of the rest.
	pr.Measured = median(rep.RTTms[min(1, len(rep.RTTms)-1):])
	if v, ok := idx[rep.Via]; ok {
		pr.Via = v
		pr.ViaMatrix = rtt(pr.A, v) + rtt(v, pr.B)
	} else {
		pr.Error = fmt.Sprintf("relayed by %q, not a peer of the bed", rep.Via)
	}
}

// circuitAddrs are the /p2p-circuit addresses among a peer's.
func circuitAddrs(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if strings.Contains(a, "/p2p-circuit") {
			out = append(out, a)
		}
	}
	return out
}

// median is xs's median (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return metrics.Percentiles(xs, 0.5)[0]
}
