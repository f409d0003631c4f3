package repel

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// attacher keeps this peer, while it holds no token, attached to a live
// holder chosen by a Chooser (measured RTT where known, predicted
// otherwise) that accepts it: every Renew, and soon after the tokens'
// holders or this peer's role change.
func (s *Selector) attacher(ctx context.Context) {
	timer := time.NewTimer(s.opts.MinReattach)
	defer timer.Stop()
	ch := s.chooser()
	s.attach.SetRegretBound(s.regretBound(ch.cfg))
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.kick:
		}
		if wait := s.opts.MinReattach - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		s.attachStep(ctx, ch)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.opts.Renew)
	}
}

// chooser is the client's Chooser from the selector options: Probe,
// Explore, ExploreFirst and Switch as given, measurements and explorations
// at most every five renewals.
func (s *Selector) chooser() *Chooser {
	cfg := DefaultAttachConfig()
	cfg.Probe = max(s.opts.Probe, 0)
	cfg.Explore = max(s.opts.Explore, 0)
	cfg.Switch = s.opts.Switch
	cfg.ProbeEvery = 5 * s.opts.Renew
	cfg.ExploreEvery = cfg.ProbeEvery
	cfg.ExploreFirst = s.opts.ExploreFirst
	ch, err := NewChooser(cfg)
	if err != nil { // Switch ≥ 1 is checked by the options' defaults
		panic(err)
	}
	return ch
}

// attachStep makes or renews the attachment: it measures the holders the
// chooser asks for (one Vivaldi exchange each), then asks the holders in
// the chooser's order and keeps the first that accepts, then measures the
// holders the chooser explores.
func (s *Selector) attachStep(ctx context.Context, ch *Chooser) {
	self := s.node.ID()
	s.mu.Lock()
	holding, live, cur := s.snap.holding, s.snap.live, s.attached
	s.mu.Unlock()
	if holding {
		if cur != "" {
			s.setAttached("", "holds a token")
			s.leave(ctx, cur)
		}
		return
	}
	me := s.viv.Coordinate()
	var cands []Candidate
	for _, t := range live {
		if peer.ID(t.Holder) == self || len(t.Coord.Vec) != len(me.Vec) {
			continue
		}
		cands = append(cands, Candidate{ID: t.Holder, Predicted: me.DistanceTo(t.Coord)})
	}
	now := time.Now()
	for id := ch.Next(now, string(cur), cands); id != ""; id = ch.Next(now, string(cur), cands) {
		rtt, err := s.sample(ctx, peer.ID(id))
		ch.Measured(now, id, rtt, err == nil)
	}
	order := ch.Ranked(now, string(cur), cands)
	for k, c := range order {
		id := c.ID
		p := peer.ID(id)
		sent := time.Now()
		ans, err := s.attach.RequestWith(ctx, p, superpeer.ClientRequest{Coord: me.Vec, Height: me.Height, Regret: Regret(order, k)})
		if err != nil && p == cur && sent.Sub(s.renewedAt)+s.opts.Renew < s.attach.TTL() {
			// A renewal that failed, not one refused: on a loaded host a
			// request times out now and then, and the holder keeps our
			// place until the TTL lapses. Moving on at the first failure
			// sent clients hopping between holders (and displacing
			// others) in large live swarms; the next step tries again,
			// and a holder that is gone is left once the next renewal
			// would come too late.
			s.stats.Add("renew_failed_kept", 1)
			return
		}
		if err != nil || ans.Status != superpeer.Accepted {
			continue
		}
		s.renewedAt = sent
		if cur != "" && cur != p {
			s.leave(ctx, cur)
		}
		s.setAttached(p, "nearest holder that accepted")
		// A coordinate exchange with a new holder, and with ours when its
		// measurement is due (every five renewals): an RTT sample of the
		// link that matters most. The holder learns where we are from the
		// request itself (its clients' coordinates drive Attract).
		if p != cur || ch.due(now, id) {
			if rtt, err := s.sample(ctx, p); err == nil {
				ch.Observed(time.Now(), id, rtt)
			}
		}
		s.explore(ctx, ch, now, cands)
		return
	}
	if cur != "" {
		s.leave(ctx, cur)
	}
	s.setAttached("", "no holder accepted")
	s.explore(ctx, ch, now, cands)
}

// explore measures the holders the chooser explores (one Vivaldi exchange
// each), after the step has asked, so that no renewal waits on them.
func (s *Selector) explore(ctx context.Context, ch *Chooser, now time.Time, cands []Candidate) {
	for id := ch.Explore(now, cands); id != ""; id = ch.Explore(now, cands) {
		rtt, err := s.sample(ctx, peer.ID(id))
		ch.Explored(now, id, rtt, err == nil)
		s.stats.Add(statExplored, 1)
	}
}

// regretBound is what this peer, as a holder, takes of its clients'
// regrets (AttachConfig.RegretBound): the estimate from the client's
// coordinate, this peer's and the other live holders'. The attach
// protocol calls it under its own lock; it takes s.mu briefly, which no
// path holds while calling into the attach protocol.
func (s *Selector) regretBound(cfg AttachConfig) func(superpeer.ClientCoord) time.Duration {
	return func(c superpeer.ClientCoord) time.Duration {
		self := s.node.ID()
		s.mu.Lock()
		live := s.snap.live
		s.mu.Unlock()
		others := make([]vivaldi.Coord, 0, len(live))
		for _, t := range live {
			if peer.ID(t.Holder) != self {
				others = append(others, t.Coord)
			}
		}
		return cfg.RegretBound(vivaldi.Coord{Vec: c.Vec, Height: c.Height}, s.viv.Coordinate(), others)
	}
}

// dropped is the attach protocol's notice that holder sp took another
// client in this peer's place: the client is unattached from now and
// looks again at once (within MinReattach), not at its next renewal.
func (s *Selector) dropped(sp peer.ID) {
	s.stats.Add(statDropped, 1)
	s.mu.Lock()
	if s.attached == sp {
		s.attached = ""
		s.publishStateLocked("dropped by its holder for another client", time.Now())
	}
	s.mu.Unlock()
	s.kickAttacher()
}

// kickAttacher has the attacher step soon (within MinReattach), if it is
// not already due to.
func (s *Selector) kickAttacher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Selector) setAttached(p peer.ID, reason string) {
	s.mu.Lock()
	s.attached = p
	s.publishStateLocked(reason, time.Now())
	s.mu.Unlock()
}

// leave ends an attachment, best effort.
func (s *Selector) leave(ctx context.Context, p peer.ID) {
	ctx, cancel := context.WithTimeout(ctx, s.attach.TTL())
	defer cancel()
	_, _ = s.attach.Request(ctx, p, true, nil, 0)
}
