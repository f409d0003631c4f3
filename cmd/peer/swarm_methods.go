package main

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// methodReport is one method's run on the swarm: the `methods` entries of
// the report. The methods run one after another on the same peers, joined
// once, over the same coordinates.
type methodReport struct {
	Method string `json:"method"`
	// Superpeers summarises the selection after convergence.
	Superpeers *swarm.SelectionSummary `json:"superpeers"`
	// SuperpeerOf is every peer's superpeer (its index; its own for a
	// superpeer) at the end of the method's run, -1 for a peer served by
	// nobody or dead.
	SuperpeerOf []int `json:"superpeer_of"`
	// RSSBytes and Goroutines are the process's once the method converged.
	RSSBytes   uint64 `json:"rss_bytes"`
	Goroutines int    `json:"goroutines"`
	// Connections are the peers' connections then (repel).
	Connections *swarm.ConnectionStats `json:"connections,omitempty"`
	// Dials are the dials of peers not connected from the method's start
	// until it converged, by the protocol that asked (swarm.Dials; repel).
	Dials map[string]uint64 `json:"dials,omitempty"`
	// VivaldiPicks are the samples the coordinate services chose over the
	// same span, by why (repel).
	VivaldiPicks *swarm.Picks `json:"vivaldi_picks,omitempty"`
	// Kill, when peers were killed after convergence.
	Kill *killReport `json:"kill,omitempty"`
	// Rest (repel) says how the selection was scored: once converged, with
	// the same token holders, for a while (--rest).
	Rest *restReport `json:"rest,omitempty"`
	// Hold (repel, --hold) is the selection again after the swarm kept
	// running for a while past its first convergence.
	Hold *holdReport `json:"hold,omitempty"`
	// VivaldiAfter is the coordinates' error once selection converged: the
	// selection runs on them, and a loaded machine can spoil them.
	VivaldiAfter *vivaldiError `json:"vivaldi_after_selection,omitempty"`
	// Repel is what the tokens did (method repel).
	Repel *swarm.RepelSummary `json:"repel,omitempty"`
}

// methodFlags are the flags of `peer swarm` that configure the methods.
type methodFlags struct {
	superpeers, capacity, probe, explore, exploreFirst int
	// fraction makes prefix's S follow it (0: fixed); capacityGiven says
	// --capacity was set, which then holds instead of 2⌈1/fraction⌉.
	fraction                    float64
	capacityGiven               bool
	pow2, killSP                bool
	ttl, displace, survey, hold time.Duration
	// rest is how many renewal intervals (ttl/3) a repel selection must
	// stay converged, with the same token holders, before it is scored (0:
	// at once).
	rest float64
	// inTransit is the fraction of the clients that may be between holders
	// at a reading of the rest.
	inTransit     float64
	startSpread   time.Duration
	force         string
	kill          float64
	dissemination repel.Dissemination
	guard         bool
	seed          int64
	// view (--web) follows each method; keep, if set, keeps the method's
	// selectors running past runMethod (release).
	view *swarm.View
	keep func(stop func())
}

// params are the flags' settings of the prefix and the token method.
func (f methodFlags) params() swarm.MethodParams {
	model := repel.Attract
	if f.force == "repulsion" {
		model = repel.Repulsion
	}
	capacity := f.capacity
	explore := f.explore
	if explore == 0 {
		explore = -1 // none; MethodParams' 0 is the selector's default
	}
	if f.fraction > 0 && !f.capacityGiven {
		capacity = 0 // the fraction's: 2⌈1/f⌉
	}
	return swarm.MethodParams{Superpeers: f.superpeers, Fraction: f.fraction, Capacity: capacity, TTL: f.ttl, Pow2: f.pow2, StartSpread: f.startSpread,
		Model: model, Survey: f.survey, Displace: f.displace, Probe: f.probe, Explore: explore, ExploreFirst: f.exploreFirst, Dissemination: f.dissemination,
		Guard: f.guard}
}

// parseMethods reads --method: all (every registered method), none, or
// names separated by commas.
func parseMethods(v string) ([]superpeer.Method, error) {
	switch v {
	case "none":
		return nil, nil
	case "all":
		return superpeer.Methods(), nil
	}
	var out []superpeer.Method
	seen := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		m, err := superpeer.Lookup(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("%w: --method %q: %v; or all, or none", errUsage, v, err)
		}
		if !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// runMethod runs one method on the swarm until it has converged (and
// recovered from --kill), reports it, and stops its selectors. Prefix and
// repel have exact convergence conditions and figures of their own; any
// other registered method runs through swarm.Run and is converged once
// every client is attached and nothing changed for three attach TTLs.
func runMethod(ctx context.Context, s *swarm.Swarm, vr *swarm.VivaldiRun, gossip *swarm.GossipCounter, m superpeer.Method, f methodFlags) (*methodReport, error) {
	mr := &methodReport{Method: m.Name}
	rng := func(k int64) *rand.Rand { return rand.New(rand.NewSource(f.seed + k)) }
	var state func() metrics.Assignment
	switch m.Name {
	case "prefix":
		if err := s.StartPrefix(ctx, f.params().PrefixOptions()...); err != nil {
			return nil, err
		}
		defer f.release(s.StopMethod)
		f.view.WatchActive()
		if f.fraction > 0 {
			if err := s.WaitCensus(ctx, f.fraction); err != nil {
				return nil, err
			}
		}
		took, err := s.WaitPrefix(ctx, s.SelectionStart())
		if err != nil {
			return nil, err
		}
		sum, err := s.Summary(took, rng(3))
		if err != nil {
			return nil, err
		}
		mr.Superpeers = &sum
		mr.RSSBytes, mr.Goroutines = swarm.RSS(), swarm.Goroutines()
		state = func() metrics.Assignment { return s.PrefixState().Assignment }
		if f.kill > 0 || f.killSP {
			victims := s.PickKill(f.kill, f.killSP, rng(4))
			kr := &killReport{Fraction: f.kill, Superpeers: f.killSP, Killed: len(victims), KilledSuper: killedSuper(victims, s.Selector)}
			s.Kill(victims)
			took, err := s.WaitPrefix(ctx, time.Now())
			if err != nil {
				return nil, err
			}
			kr.RecoverSeconds = took.Seconds()
			after, err := s.Summary(took, rng(3))
			if err != nil {
				return nil, err
			}
			kr.After = &after
			mr.Kill = kr
		}
	case "repel":
		ro := f.params().RepelOptions()
		cfg := ro.Config
		dials0, picks0 := s.Dials(), vr.Picks()
		rr, err := s.StartRepel(ctx, vr, ro, gossip)
		if err != nil {
			return nil, err
		}
		defer f.release(rr.Close)
		f.view.WatchRepel(rr)
		if f.fraction > 0 {
			if err := s.WaitCensus(ctx, f.fraction); err != nil {
				return nil, err
			}
		}
		rest := time.Duration(f.rest * float64(f.ttl) / 3)
		transit := int(f.inTransit * float64(max(0, len(s.Live())-f.superpeers)))
		at, err := rr.WaitAtRest(ctx, rr.Start(), rest, transit)
		if err != nil {
			return nil, err
		}
		took := at.At
		mr.Rest = &restReport{Renewals: f.rest, RestSeconds: rest.Seconds(), FirstConvergedSeconds: at.First.Seconds(), ClientsMoved: at.Moved,
			InTransitFraction: f.inTransit, InTransitAllowed: transit, InTransitMax: at.InTransitMax, InTransitEnd: at.InTransitEnd}
		// Read before the summary: its baselines (a greedy k-median over
		// the matrix, random draws) are the report's work, not the
		// swarm's, and load the machine while the peers still sample.
		mr.VivaldiAfter = vivaldiErrorOf(vr)
		sum, rs, err := rr.Summary(took, rng(3))
		if err != nil {
			return nil, err
		}
		mr.Superpeers, mr.Repel = &sum, &rs
		mr.RSSBytes, mr.Goroutines = swarm.RSS(), swarm.Goroutines()
		cs := s.ConnectionStats()
		mr.Connections = &cs
		mr.Dials = s.Dials()
		for k, v := range dials0 {
			mr.Dials[k] -= v
		}
		picks := vr.Picks().Sub(picks0)
		mr.VivaldiPicks = &picks
		state = func() metrics.Assignment { return rr.State().Assignment }
		if f.hold > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(s.Wall(f.hold)):
			}
			start := time.Now()
			waited, err := rr.Wait(ctx, start, func(st swarm.RepelState) bool { return st.ConvergedWithin(transit) })
			if err != nil {
				return nil, err
			}
			viv := vivaldiErrorOf(vr) // before the summary, as above
			after, rs, err := rr.Summary(s.Elapsed(rr.Start()), rng(3))
			if err != nil {
				return nil, err
			}
			mr.Hold = &holdReport{HeldSeconds: f.hold.Seconds(), WaitedSeconds: waited.Seconds(), After: &after, RepelAfter: &rs, VivaldiAfter: viv}
		}
		if f.kill > 0 || f.killSP {
			holders := 0.5
			if f.killSP {
				holders = 1
			}
			victims := rr.PickKill(f.kill, holders, rng(4))
			kr := &killReport{Fraction: f.kill, Superpeers: f.killSP, Killed: len(victims), BoundSeconds: (cfg.DeadAfter + cfg.SettleAfter).Seconds(),
				KilledSuper: killedSuper(victims, rr.Selector)}
			start := time.Now()
			rr.Kill(victims)
			back, err := rr.Wait(ctx, start, swarm.RepelState.TokensBack)
			if err != nil {
				return nil, err
			}
			kr.TokensBackSeconds = back.Seconds()
			took, err := rr.WaitConverged(ctx, start)
			if err != nil {
				return nil, err
			}
			kr.RecoverSeconds = took.Seconds()
			after, rs, err := rr.Summary(took, rng(3))
			if err != nil {
				return nil, err
			}
			kr.After, kr.RepelAfter = &after, &rs
			mr.Kill = kr
		}
	default:
		env := superpeer.Env{Superpeers: f.superpeers, Attach: []superpeer.Option{superpeer.WithCapacity(f.capacity), superpeer.WithTTL(f.ttl), superpeer.WithDisplace(f.displace)}}
		var v *swarm.VivaldiRun
		if m.Coordinates {
			v = vr
		}
		r, err := s.StartMethod(ctx, m.Name, swarm.MethodOptions{Env: env, Vivaldi: v})
		if err != nil {
			return nil, err
		}
		defer f.release(r.Close)
		f.view.Watch(r)
		quiet := 3 * f.ttl
		took, err := r.WaitSettled(ctx, r.Start(), quiet)
		if err != nil {
			return nil, err
		}
		sum, err := r.Summary(took, f.superpeers, rng(3))
		if err != nil {
			return nil, err
		}
		mr.Superpeers = &sum
		mr.RSSBytes, mr.Goroutines = swarm.RSS(), swarm.Goroutines()
		state = func() metrics.Assignment { return r.State().Assignment }
		if f.kill > 0 || f.killSP {
			victims := r.PickKill(f.kill, f.killSP, rng(4))
			kr := &killReport{Fraction: f.kill, Superpeers: f.killSP, Killed: len(victims), KilledSuper: killedSuper(victims, r.Selector)}
			start := time.Now()
			r.Kill(victims)
			took, err := r.WaitSettled(ctx, start, quiet)
			if err != nil {
				return nil, err
			}
			kr.RecoverSeconds = took.Seconds()
			after, err := r.Summary(took, f.superpeers, rng(3))
			if err != nil {
				return nil, err
			}
			kr.After = &after
			mr.Kill = kr
		}
	}
	a := state()
	mr.SuperpeerOf = make([]int, len(a))
	for i, j := range a {
		mr.SuperpeerOf[i] = max(j, -1)
	}
	return mr, nil
}

// killedSuper counts the victims that were superpeers.
func killedSuper[S interface{ Role() superpeer.Role }](victims []int, sel func(i int) S) int {
	n := 0
	for _, i := range victims {
		if sel(i).Role() == superpeer.Superpeer {
			n++
		}
	}
	return n
}

// printMethods prints the methods side by side with the yardsticks: S
// random superpeers and the greedy k-median, over the same live peers.
func printMethods(w io.Writer, ms []*methodReport) {
	if len(ms) == 0 {
		return
	}
	fmt.Fprintf(w, "\nside by side (client → superpeer RTT in ms over the true latencies; capacity %d):\n", ms[0].Superpeers.Capacity)
	fmt.Fprintf(w, "  %-26s %10s %9s %8s %8s %9s %10s %9s %9s\n", "method", "superpeers", "converge", "mean", "p90", "×random", "×k-median", "load max", "unserved")
	for _, m := range ms {
		s := m.Superpeers
		fmt.Fprintf(w, "  %-26s %10d %8.1fs %8.1f %8.1f %9.2f %10.2f %9d %9d\n", m.Method, s.Count, s.ConvergeSeconds, s.ClientRTT.Mean, s.ClientRTT.P90,
			s.ClientRTT.Mean/s.RandomClientRTT.Mean, s.ClientRTT.Mean/s.KMedianClientRTT.Mean, s.ClientsPerSuperpeer.Max, s.Unserved)
	}
	s := ms[0].Superpeers
	fmt.Fprintf(w, "  %-26s %10d %9s %8.1f %8.1f %9.2f %10.2f\n", "random (yardstick)", s.Target, "-", s.RandomClientRTT.Mean, s.RandomClientRTT.P90, 1.0, s.RandomClientRTT.Mean/s.KMedianClientRTT.Mean)
	fmt.Fprintf(w, "  %-26s %10d %9s %8.1f %8.1f %9.2f %10.2f\n", "greedy k-median (central)", s.Target, "-", s.KMedianClientRTT.Mean, s.KMedianClientRTT.P90, s.KMedianClientRTT.Mean/s.RandomClientRTT.Mean, 1.0)
}
