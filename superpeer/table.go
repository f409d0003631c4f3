package superpeer

import (
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// AttachTable is the superpeer side of the attach protocol as a pure core:
// the clients a superpeer serves, each with its last renewal, the regret it
// said and its coordinate; the capacity; the leases; and displacement by
// regret (WithDisplace). Attach runs it behind its lock, the simulator on
// virtual time. Time is an argument; the table reads no clock, starts
// nothing and is not safe for concurrent use. Client IDs are not empty.
type AttachTable struct {
	// Bound, if set, is the most regret the table takes from a client that
	// sends coord: what the superpeer can check of a claim it cannot
	// measure (repel.AttachConfig.RegretBound: the coordinates' estimate).
	// A larger regret is taken at the bound and counted in Capped, so a
	// client that claims to have no other choice does not displace the
	// served clients for it.
	Bound func(coord ClientCoord) time.Duration
	// Capped counts the regrets Bound lowered.
	Capped uint64

	capacity int           // 0 or less: unbounded
	ttl      time.Duration // a lease lapses when silent for longer
	displace time.Duration // WithDisplace
	clients  map[peer.ID]served
	// oldest is at most every served client's last renewal (any value
	// when none is served): expire scans the leases only once the oldest
	// can have lapsed, not on every admission.
	oldest time.Time
	// least caches the served client of least regret (then of least ID)
	// while ok: a full table refuses or displaces newcomers in O(1)
	// instead of scanning its clients for each.
	least struct {
		id     peer.ID
		regret time.Duration
		ok     bool
	}
}

// served is a client's last renewal and what it said then.
type served struct {
	at     time.Time
	regret time.Duration
	coord  ClientCoord
}

// NewAttachTable is an empty table of at most capacity clients (0:
// unbounded) whose leases lapse after ttl without renewal, where a
// newcomer to a full table takes the place of a served client under the
// rule of WithDisplace with margin displace.
func NewAttachTable(capacity int, ttl, displace time.Duration) *AttachTable {
	return &AttachTable{capacity: capacity, ttl: ttl, displace: displace, clients: map[peer.ID]served{}}
}

// Admit makes or renews id's lease at now, after forgetting the clients
// silent for longer than the TTL. A client already served is always
// renewed, its regret and coordinate replaced. A newcomer is accepted while
// the table has room; when it is full, it is accepted only in place of the
// served client of least regret (then of least ID) that it displaces (the
// rule of WithDisplace), returned as displaced, and refused (Full)
// otherwise. regret is what id loses if refused (ClientRequest.Regret),
// taken as the attach protocol carries it: in whole microseconds (rounded
// toward zero) within ±(2^31−1) µs, and at most Bound's.
func (t *AttachTable) Admit(now time.Time, id peer.ID, regret time.Duration, coord ClientCoord) (st Status, displaced peer.ID) {
	if t.Bound != nil {
		if b := t.Bound(coord); regret > b {
			regret = b
			t.Capped++
		}
	}
	regret = time.Duration(regretMicros(regret)) * time.Microsecond
	t.expire(now)
	if _, ok := t.clients[id]; !ok && t.full() {
		victim, ok := t.displaceable(regret)
		if !ok {
			return Full, ""
		}
		t.remove(victim)
		displaced = victim
	}
	if len(t.clients) == 0 || now.Before(t.oldest) {
		t.oldest = now
	}
	t.put(id, served{at: now, regret: regret, coord: coord})
	return Accepted, displaced
}

// put serves id as c, keeping the least-regret cache true.
func (t *AttachTable) put(id peer.ID, c served) {
	old, had := t.clients[id]
	t.clients[id] = c
	switch l := &t.least; {
	case len(t.clients) == 1:
		l.id, l.regret, l.ok = id, c.regret, true
	case !l.ok:
	case id == l.id && had && c.regret > old.regret:
		l.ok = false // the least may now be another's
	case c.regret < l.regret || c.regret == l.regret && id <= l.id:
		l.id, l.regret = id, c.regret
	}
}

// remove forgets id, keeping the least-regret cache true.
func (t *AttachTable) remove(id peer.ID) {
	delete(t.clients, id)
	if t.least.ok && t.least.id == id {
		t.least.ok = false
	}
}

// Leave ends id's lease; it reports whether id was served.
func (t *AttachTable) Leave(id peer.ID) bool {
	_, ok := t.clients[id]
	t.remove(id)
	return ok
}

// full is whether a newcomer finds no free place.
func (t *AttachTable) full() bool { return t.capacity > 0 && len(t.clients) >= t.capacity }

// serves is whether id holds a lease (expired or not).
func (t *AttachTable) serves(id peer.ID) bool {
	_, ok := t.clients[id]
	return ok
}

// expire forgets the clients silent for longer than the TTL at now (one
// silent for exactly the TTL stays) and returns them, sorted.
func (t *AttachTable) expire(now time.Time) []peer.ID {
	if len(t.clients) == 0 || now.Sub(t.oldest) <= t.ttl {
		return nil
	}
	var out []peer.ID
	oldest := now
	for p, c := range t.clients {
		if now.Sub(c.at) > t.ttl {
			t.remove(p)
			out = append(out, p)
		} else if c.at.Before(oldest) {
			oldest = c.at
		}
	}
	t.oldest = oldest
	slices.Sort(out)
	return out
}

// dropAll forgets every client and returns them, sorted.
func (t *AttachTable) dropAll() []peer.ID {
	out := t.ids()
	clear(t.clients)
	t.least.ok = false
	return out
}

// ids are the served clients, sorted (as of the last expiry).
func (t *AttachTable) ids() []peer.ID {
	out := make([]peer.ID, 0, len(t.clients))
	for p := range t.clients {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// load is how many clients are served (as of the last expiry).
func (t *AttachTable) load() int { return len(t.clients) }

// coords are the coordinates the served clients last sent, for those that
// sent one, copied.
func (t *AttachTable) coords() map[peer.ID]ClientCoord {
	out := make(map[peer.ID]ClientCoord, len(t.clients))
	for p, c := range t.clients {
		if len(c.coord.Vec) > 0 {
			out[p] = ClientCoord{Vec: slices.Clone(c.coord.Vec), Height: c.coord.Height}
		}
	}
	return out
}

// displaceable is the served client a newcomer with this regret may take
// the place of: the one of least regret (then of least ID), if the
// newcomer's exceeds it by more than the margin (displaces).
func (t *AttachTable) displaceable(regret time.Duration) (peer.ID, bool) {
	if t.displace <= 0 || regret <= 0 { // no one to displace: skip the search
		return "", false
	}
	if !t.least.ok {
		found := false
		for p, c := range t.clients {
			if !found || c.regret < t.least.regret || (c.regret == t.least.regret && p < t.least.id) {
				t.least.id, t.least.regret, found = p, c.regret, true
			}
		}
		if !found {
			return "", false
		}
		t.least.ok = true
	}
	if !displaces(t.displace, regret, t.least.regret) {
		return "", false
	}
	return t.least.id, true
}

// displaces is the rule of WithDisplace: a newcomer that says
// regret takes the place of a served client that said least (negative if
// that one would gain by going) when it loses more than margin more without
// it. margin ≤ 0 turns it off, and a newcomer that says no regret (or a
// negative one) never displaces anyone.
func displaces(margin, regret, least time.Duration) bool {
	return margin > 0 && regret > 0 && regret-least > margin
}
