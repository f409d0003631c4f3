package repel

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

// attacher keeps this peer, while it holds no token, attached to the live
// holder of lowest predicted RTT that accepts it: every Renew, and soon
// after the tokens' holders or this peer's role change.
func (s *Selector) attacher(ctx context.Context) {
	timer := time.NewTimer(s.opts.MinReattach)
	defer timer.Stop()
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
		s.attachStep(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(s.opts.Renew)
	}
}

// attachStep makes or renews the attachment.
func (s *Selector) attachStep(ctx context.Context) {
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
	type cand struct {
		p peer.ID
		d float64
	}
	var cands []cand
	curAt := -1
	for _, t := range live {
		p := peer.ID(t.Holder)
		if p == self || len(t.Coord.Vec) != len(me.Vec) {
			continue
		}
		cands = append(cands, cand{p, me.DistanceTo(t.Coord)})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	for i, c := range cands {
		if c.p == cur {
			curAt = i
		}
	}
	// Keep the current holder unless another is clearly nearer: Vivaldi
	// jitter should not bounce clients between two holders.
	keep := curAt == 0 || (curAt > 0 && cands[curAt].d <= s.opts.Switch*cands[0].d)
	if curAt > 0 && keep {
		c := cands[curAt]
		cands = append([]cand{c}, append(cands[:curAt:curAt], cands[curAt+1:]...)...)
	}
	// Choosing anew (not attached, our holder gone, or another clearly
	// nearer): measure the Probe predicted-nearest holders and try them by
	// measured RTT, since the embedding's error decides the far tail. Not
	// more often than every few renewals.
	if !keep && s.opts.Probe > 0 && (curAt < 0 || time.Since(s.probed) > 5*s.opts.Renew) {
		s.probed = time.Now()
		k := min(s.opts.Probe, len(cands))
		probe := append([]cand(nil), cands[:k]...)
		if curAt >= k {
			probe = append(probe, cands[curAt])
		}
		for i := range probe {
			if rtt, err := s.viv.Sample(ctx, probe[i].p); err == nil {
				probe[i].d = rtt.Seconds()
			} else {
				probe[i].d = math.Inf(1)
			}
		}
		sort.SliceStable(probe, func(i, j int) bool { return probe[i].d < probe[j].d })
		rest := cands[k:]
		if curAt >= k {
			rest = append(append([]cand(nil), cands[k:curAt]...), cands[curAt+1:]...)
		}
		cands = append(probe, rest...)
	}
	for _, c := range cands {
		ans, err := s.attach.Request(ctx, c.p, false, me.Vec, me.Height)
		if err != nil || ans.Status != superpeer.Accepted {
			continue
		}
		if cur != "" && cur != c.p {
			s.leave(ctx, cur)
		}
		s.setAttached(c.p, "nearest holder that accepted")
		// One coordinate exchange with our holder: it learns where we are
		// (its clients' coordinates drive Attract) and we get an RTT
		// sample of the link that matters most.
		_, _ = s.viv.Sample(ctx, c.p)
		return
	}
	if cur != "" {
		s.leave(ctx, cur)
	}
	s.setAttached("", "no holder accepted")
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
