package superpeer

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

var t0 = time.Unix(1000, 0)

// tableOf is a table holding the given clients: id → regret, all renewed at
// t0 unless at says otherwise.
func tableOf(capacity int, ttl, displace time.Duration, regrets map[peer.ID]time.Duration, at map[peer.ID]time.Time) *AttachTable {
	t := NewAttachTable(capacity, ttl, displace)
	for _, id := range slices.Sorted(maps.Keys(regrets)) {
		when := t0
		if w, ok := at[id]; ok {
			when = w
		}
		t.clients[id] = served{at: when, regret: regrets[id]}
	}
	return t
}

// Every rule of one Admit: room, refusal, renewal, displacement (the
// margin, which client, ties, negative regrets, no other choice), the
// expiry before the decision.
func TestAttachTable_Admit(t *testing.T) {
	ms := time.Millisecond
	ttl := 10 * time.Second
	for _, tc := range []struct {
		name      string
		capacity  int
		displace  time.Duration
		served    map[peer.ID]time.Duration // id → regret
		at        map[peer.ID]time.Time     // last renewal if not t0
		id        peer.ID
		regret    time.Duration
		now       time.Duration // after t0
		want      Status
		displaced peer.ID
		after     []peer.ID
	}{
		{name: "empty", capacity: 2, id: "n", want: Accepted, after: []peer.ID{"n"}},
		{name: "room left", capacity: 2, served: map[peer.ID]time.Duration{"a": 0}, id: "n", want: Accepted, after: []peer.ID{"a", "n"}},
		{name: "full", capacity: 2, served: map[peer.ID]time.Duration{"a": 0, "b": 0}, id: "n", regret: maxRegret, want: Full, after: []peer.ID{"a", "b"}},
		{name: "full, a renewal", capacity: 2, served: map[peer.ID]time.Duration{"a": 0, "b": 0}, id: "b", want: Accepted, after: []peer.ID{"a", "b"}},
		{name: "capacity 0 is unbounded", capacity: 0, served: map[peer.ID]time.Duration{"a": 0, "b": 0, "c": 0}, id: "n", want: Accepted, after: []peer.ID{"a", "b", "c", "n"}},
		{name: "negative capacity is unbounded", capacity: -1, served: map[peer.ID]time.Duration{"a": 0}, id: "n", want: Accepted, after: []peer.ID{"a", "n"}},

		{name: "displaces the least regret", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: 10 * ms, want: Accepted, displaced: "b", after: []peer.ID{"a", "n"}},
		{name: "the least regret, not the first ID", capacity: 3, displace: ms, served: map[peer.ID]time.Duration{"a": 5 * ms, "b": 4 * ms, "c": 2 * ms}, id: "n", regret: 10 * ms, want: Accepted, displaced: "c", after: []peer.ID{"a", "b", "n"}},
		{name: "over by exactly the margin", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: 4 * ms, want: Full, after: []peer.ID{"a", "b"}},
		{name: "over by a microsecond more", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: 4*ms + time.Microsecond, want: Accepted, displaced: "b", after: []peer.ID{"a", "n"}},
		{name: "less than a microsecond over is not carried", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: 4*ms + 999, want: Full, after: []peer.ID{"a", "b"}},
		{name: "within the margin", capacity: 2, displace: 2 * ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: 4 * ms, want: Full, after: []peer.ID{"a", "b"}},
		{name: "ties go to the least ID", capacity: 3, displace: ms, served: map[peer.ID]time.Duration{"c": 2 * ms, "a": 2 * ms, "b": 9 * ms}, id: "n", regret: 10 * ms, want: Accepted, displaced: "a", after: []peer.ID{"b", "c", "n"}},
		{name: "a served client that gains by going", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "n", regret: 500 * time.Microsecond, want: Accepted, displaced: "b", after: []peer.ID{"a", "n"}},
		{name: "no regret said", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "n", regret: 0, want: Full, after: []peer.ID{"a", "b"}},
		{name: "a newcomer that gains by going elsewhere", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": -20 * ms, "b": -50 * ms}, id: "n", regret: -ms, want: Full, after: []peer.ID{"a", "b"}},
		{name: "no other choice", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms}, id: "n", regret: maxRegret, want: Accepted, displaced: "b", after: []peer.ID{"a", "n"}},
		{name: "a no-other-choice regret (repel's) against a negative regret", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "n", regret: math.MaxInt64, want: Accepted, displaced: "b", after: []peer.ID{"a", "n"}},
		{name: "no other choice against no other choice", capacity: 1, displace: ms, served: map[peer.ID]time.Duration{"a": maxRegret}, id: "n", regret: maxRegret, want: Full, after: []peer.ID{"a"}},
		{name: "no other choice against -maxRegret", capacity: 1, displace: ms, served: map[peer.ID]time.Duration{"a": -maxRegret}, id: "n", regret: maxRegret, want: Accepted, displaced: "a", after: []peer.ID{"n"}},
		{name: "displacement off", capacity: 2, displace: 0, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "n", regret: maxRegret, want: Full, after: []peer.ID{"a", "b"}},
		{name: "negative margin is off", capacity: 2, displace: -ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "n", regret: maxRegret, want: Full, after: []peer.ID{"a", "b"}},
		{name: "a renewal at capacity displaces no one", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": -5 * ms}, id: "a", regret: maxRegret, want: Accepted, after: []peer.ID{"a", "b"}},

		{name: "expiry before the decision", capacity: 2, displace: ms, served: map[peer.ID]time.Duration{"a": 20 * ms, "b": 3 * ms},
			at: map[peer.ID]time.Time{"a": t0.Add(-ttl - 1)}, id: "n", regret: maxRegret, want: Accepted, after: []peer.ID{"b", "n"}},
		{name: "silent for exactly the TTL stays", capacity: 2, served: map[peer.ID]time.Duration{"a": 0, "b": 0},
			now: ttl, id: "n", want: Full, after: []peer.ID{"a", "b"}},
		{name: "silent a nanosecond longer lapses", capacity: 2, served: map[peer.ID]time.Duration{"a": 0, "b": 0},
			at: map[peer.ID]time.Time{"b": t0.Add(1)}, now: ttl + 1, id: "n", want: Accepted, after: []peer.ID{"b", "n"}},
		{name: "a lapsed client comes back as a newcomer", capacity: 1, served: map[peer.ID]time.Duration{"a": 0},
			now: ttl + 1, id: "a", want: Accepted, after: []peer.ID{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := tableOf(tc.capacity, ttl, tc.displace, tc.served, tc.at)
			now := t0.Add(tc.now)
			st, d := tb.Admit(now, tc.id, tc.regret, ClientCoord{})
			if st != tc.want || d != tc.displaced {
				t.Errorf("Admit = %v, displaced %q; want %v, %q", st, d, tc.want, tc.displaced)
			}
			if got := tb.ids(); !slices.Equal(got, tc.after) {
				t.Errorf("clients after %v, want %v", got, tc.after)
			}
			if st == Accepted {
				if c := tb.clients[tc.id]; !c.at.Equal(now) || c.regret != wire(tc.regret) {
					t.Errorf("the lease says %v, regret %v; want %v, %v", c.at, c.regret, now, wire(tc.regret))
				}
			}
		})
	}
}

// wire is a regret as the attach protocol carries it.
func wire(r time.Duration) time.Duration { return time.Duration(regretMicros(r)) * time.Microsecond }

// The table takes a regret as the wire carries it, whatever its caller
// passes: whole microseconds toward zero, so that clients a microsecond
// apart tie (and the least ID goes), within ±maxRegret, so that
// A no-other-choice regret (the largest Duration) displaces a client that gains
// by going as maxRegret does.
func TestAttachTable_RegretAsTheWireCarriesIt(t *testing.T) {
	ms := time.Millisecond
	tb := NewAttachTable(2, time.Minute, ms)
	tb.Admit(t0, "a", 2*ms+900, ClientCoord{})
	tb.Admit(t0, "b", 2*ms+100, ClientCoord{})
	if r := tb.clients["a"].regret; r != 2*ms {
		t.Errorf("regret kept %v, want 2ms", r)
	}
	if st, d := tb.Admit(t0, "n", 10*ms, ClientCoord{}); st != Accepted || d != "a" {
		t.Errorf("newcomer: %v, displaced %q; want a (tied with b at 2 ms, the least ID)", st, d)
	}
	for _, c := range []struct{ in, want time.Duration }{
		{math.MaxInt64, maxRegret}, {math.MinInt64, -maxRegret}, {-1500, -time.Microsecond}, {999, 0},
	} {
		tb.Admit(t0, "n", c.in, ClientCoord{})
		if r := tb.clients["n"].regret; r != c.want {
			t.Errorf("regret %v kept as %v, want %v", c.in, r, c.want)
		}
	}
}

// A renewal moves the lease on and replaces the regret and coordinate.
func TestAttachTable_RenewalRefreshesLeaseRegretAndCoord(t *testing.T) {
	ms := time.Millisecond
	ttl := 10 * time.Second
	tb := NewAttachTable(2, ttl, ms)
	tb.Admit(t0, "a", 2*ms, ClientCoord{Vec: []float64{1}})
	tb.Admit(t0, "b", 9*ms, ClientCoord{})
	// a's renewal says more regret and no coordinate: b is now the least.
	if st, d := tb.Admit(t0.Add(ttl), "a", 20*ms, ClientCoord{}); st != Accepted || d != "" {
		t.Fatalf("renewal: %v, %q", st, d)
	}
	if cc := tb.coords(); len(cc) != 0 {
		t.Errorf("coordinates after a renewal without one: %v", cc)
	}
	if st, d := tb.Admit(t0.Add(ttl), "n", 11*ms, ClientCoord{}); st != Accepted || d != "b" {
		t.Fatalf("newcomer: %v, %q; want b displaced", st, d)
	}
	// a renewed at t0+TTL: alive at t0+2TTL, gone a nanosecond later.
	if ex := tb.expire(t0.Add(2 * ttl)); len(ex) != 0 {
		t.Errorf("expired at exactly the TTL after the renewal: %v", ex)
	}
	if ex := tb.expire(t0.Add(2*ttl + 1)); !slices.Equal(ex, []peer.ID{"a", "n"}) {
		t.Errorf("expired %v, want [a n]", ex)
	}
}

func TestAttachTable_LeaveDropAndCoords(t *testing.T) {
	tb := NewAttachTable(2, time.Minute, 0)
	vec := []float64{0.01, 0.02}
	tb.Admit(t0, "b", 0, ClientCoord{Vec: vec, Height: 0.001})
	tb.Admit(t0, "a", 0, ClientCoord{})
	if st, _ := tb.Admit(t0, "c", 0, ClientCoord{}); st != Full {
		t.Fatalf("third client %v, want FULL", st)
	}
	cc := tb.coords()
	if len(cc) != 1 || cc["b"].Height != 0.001 || !slices.Equal(cc["b"].Vec, vec) {
		t.Fatalf("coordinates %v", cc)
	}
	cc["b"].Vec[0] = 7 // a copy
	if tb.clients["b"].coord.Vec[0] != 0.01 {
		t.Error("coords shares the table's slice")
	}
	if !tb.Leave("a") || tb.Leave("a") || tb.Leave("x") {
		t.Error("Leave reports wrongly whether the client was served")
	}
	if st, _ := tb.Admit(t0, "c", 0, ClientCoord{}); st != Accepted || tb.load() != 2 {
		t.Errorf("the place a leave freed: %v, load %d", st, tb.load())
	}
	if got := tb.dropAll(); !slices.Equal(got, []peer.ID{"b", "c"}) || tb.load() != 0 {
		t.Errorf("dropAll %v, load %d after", got, tb.load())
	}
}

func TestDisplaces_Rule(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		margin, regret, least time.Duration
		want                  bool
	}{
		{ms, 10 * ms, 3 * ms, true},
		{ms, 4 * ms, 3 * ms, false}, // by exactly the margin
		{ms, 4*ms + 1, 3 * ms, true},
		{ms, ms / 2, -5 * ms, true},
		{ms, 0, -5 * ms, false},
		{ms, -ms, -5 * ms, false},
		{0, maxRegret, -maxRegret, false},
		{-ms, maxRegret, -maxRegret, false},
		{ms, maxRegret, -maxRegret, true},
		{ms, maxRegret, maxRegret, false},
	} {
		if got := displaces(c.margin, c.regret, c.least); got != c.want {
			t.Errorf("displaces(%v, %v, %v) = %v, want %v", c.margin, c.regret, c.least, got, c.want)
		}
	}
}

// Random sequences of requests, leaves and expiries on small tables: the
// load never passes the capacity; a displaced client is never the
// newcomer, was served, had the least regret (then ID) and is gone; a
// refusal comes only from a full table; an expiry removes exactly the
// clients silent for longer than the TTL and nothing else.
func TestAttachTable_Properties(t *testing.T) {
	ms := time.Millisecond
	ttl := 10 * time.Second
	regrets := []time.Duration{math.MinInt64, -maxRegret, -5 * ms, -ms, -1, 0, 999, ms / 2, ms, ms + 1, 2 * ms, 2*ms + 999, 3 * ms, 10 * ms, maxRegret, math.MaxInt64}
	ids := []peer.ID{"a", "b", "c", "d", "e", "f", "g", "h"}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := rng.IntN(5) // 0: unbounded
		displace := []time.Duration{0, ms, 2 * ms}[rng.IntN(3)]
		tb := NewAttachTable(capacity, ttl, displace)
		type lease struct {
			at     time.Time
			regret time.Duration
		}
		shadow := map[peer.ID]lease{} // what the table should hold, from its answers
		now := t0
		fail := func(step int, format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (capacity %d, displace %v), step %d: %s", seed, capacity, displace, step, fmt.Sprintf(format, args...))
		}
		// stale removes from the shadow the leases that lapse at now and
		// returns them, sorted.
		stale := func() []peer.ID {
			var out []peer.ID
			for p, l := range shadow {
				if now.Sub(l.at) > ttl {
					out = append(out, p)
					delete(shadow, p)
				}
			}
			slices.Sort(out)
			return out
		}
		for step := range 200 {
			now = now.Add(time.Duration(rng.IntN(4000)) * ms)
			id := ids[rng.IntN(len(ids))]
			switch op := rng.IntN(10); {
			case op < 7:
				regret := regrets[rng.IntN(len(regrets))]
				stale()
				_, renewal := shadow[id]
				before := maps.Clone(shadow)
				st, d := tb.Admit(now, id, regret, ClientCoord{})
				switch {
				case st == Full:
					if renewal || capacity <= 0 || len(before) < capacity {
						fail(step, "refused %s (renewal %v) at load %d of %d", id, renewal, len(before), capacity)
					}
				case d != "":
					if d == id || renewal || capacity <= 0 || len(before) < capacity {
						fail(step, "%s displaced %s (renewal %v) at load %d of %d", id, d, renewal, len(before), capacity)
					}
					v, ok := before[d]
					if !ok {
						fail(step, "displaced %s, not served", d)
					}
					for p, l := range before {
						if l.regret < v.regret || (l.regret == v.regret && p < d) {
							fail(step, "displaced %s (regret %v), not %s (regret %v)", d, v.regret, p, l.regret)
						}
					}
					if !displaces(displace, wire(regret), v.regret) {
						fail(step, "%s (regret %v) displaced %s (regret %v) with margin %v", id, regret, d, v.regret, displace)
					}
					delete(shadow, d)
					shadow[id] = lease{now, wire(regret)}
				default:
					if !renewal && capacity > 0 && len(before) >= capacity {
						fail(step, "accepted %s into a full table without displacing anyone", id)
					}
					shadow[id] = lease{now, wire(regret)}
				}
			case op < 9:
				_, was := shadow[id]
				if got := tb.Leave(id); got != was {
					// Leave does not expire: a lapsed lease not yet
					// expired is still there to leave.
					fail(step, "Leave(%s) = %v, want %v", id, got, was)
				}
				delete(shadow, id)
			default:
				want := stale()
				if got := tb.expire(now); !slices.Equal(got, want) {
					fail(step, "expire removed %v, want %v", got, want)
				}
			}
			if capacity > 0 && tb.load() > capacity {
				fail(step, "load %d over capacity %d", tb.load(), capacity)
			}
			if got, want := tb.ids(), slices.Sorted(maps.Keys(shadow)); !slices.Equal(got, want) {
				fail(step, "table holds %v, want %v", got, want)
			}
			for p, l := range shadow {
				if c := tb.clients[p]; !c.at.Equal(l.at) || c.regret != l.regret {
					fail(step, "%s: lease %v regret %v, want %v %v", p, c.at, c.regret, l.at, l.regret)
				}
			}
		}
	}
}

// BenchmarkAttachTable_Admit renews leases in a table of 10 000 clients
// (a superpeer of an unbounded group): the expiry scan must not run on
// every admission.
func BenchmarkAttachTable_Admit(b *testing.B) {
	const n = 10_000
	t := NewAttachTable(0, time.Minute, DefaultDisplace)
	ids := make([]peer.ID, n)
	now := time.Unix(0, 0)
	for i := range ids {
		ids[i] = peer.ID(fmt.Sprintf("client-%05d", i))
		t.Admit(now, ids[i], 0, ClientCoord{})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		t.Admit(now, ids[i%n], 0, ClientCoord{})
	}
}

// BenchmarkAttachTable_AdmitFull offers a full table of 250 clients
// newcomers of too little regret to displace anyone, and renews its
// clients between them: what a popular holder does under capacity. The
// search for the client of least regret must not run for each refusal.
func BenchmarkAttachTable_AdmitFull(b *testing.B) {
	const c = 250
	t := NewAttachTable(c, time.Minute, DefaultDisplace)
	ids := make([]peer.ID, c)
	now := time.Unix(0, 0)
	for i := range ids {
		ids[i] = peer.ID(fmt.Sprintf("client-%05d", i))
		t.Admit(now, ids[i], time.Duration(i)*time.Millisecond, ClientCoord{})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		if i%8 == 0 {
			t.Admit(now, ids[i%c], time.Duration(i%c)*time.Millisecond, ClientCoord{})
			continue
		}
		if st, _ := t.Admit(now, peer.ID(fmt.Sprint("new-", i%1000)), time.Millisecond, ClientCoord{}); st != Full {
			b.Fatalf("admitted a newcomer of 1 ms regret into a full table")
		}
	}
}

// With a Bound, a regret over it is taken at the bound and counted: a
// newcomer that claims to have no other choice displaces only a served
// client whose regret its bound exceeds by the margin, and a served
// client's claim is kept at the bound (so a later newcomer may displace
// it). A regret within the bound is taken as said and not counted.
func TestAttachTable_BoundCapsRegrets(t *testing.T) {
	ms := time.Millisecond
	tb := NewAttachTable(2, time.Minute, ms)
	tb.Bound = func(c ClientCoord) time.Duration {
		if len(c.Vec) == 0 {
			return 0
		}
		return time.Duration(c.Vec[0] * float64(time.Second))
	}
	at := func(x float64) ClientCoord { return ClientCoord{Vec: []float64{x}} }
	tb.Admit(t0, "a", 20*ms, at(0.050)) // within its bound: 20 ms
	tb.Admit(t0, "b", 5*ms, at(0.050))  // 5 ms
	if tb.Capped != 0 || tb.clients["a"].regret != 20*ms {
		t.Fatalf("claims within the bound: %d capped, a's regret %v", tb.Capped, tb.clients["a"].regret)
	}
	// A liar whose bound is 5.5 ms: not 1 ms over b's 5 ms.
	if st, d := tb.Admit(t0, "liar", maxRegret, at(0.0055)); st != Full || d != "" || tb.Capped != 1 {
		t.Fatalf("bounded liar: %v, displaced %q, %d capped; want FULL, 1 capped", st, d, tb.Capped)
	}
	// The same claim with a bound of 7 ms displaces b, and is kept at 7.
	if st, d := tb.Admit(t0, "liar", maxRegret, at(0.007)); st != Accepted || d != "b" || tb.Capped != 2 || tb.clients["liar"].regret != 7*ms {
		t.Fatalf("liar bounded at 7 ms: %v, displaced %q, %d capped, regret %v", st, d, tb.Capped, tb.clients["liar"].regret)
	}
	// Without a coordinate the bound here is 0: it cannot displace.
	if st, _ := tb.Admit(t0, "n", maxRegret, ClientCoord{}); st != Full || tb.Capped != 3 {
		t.Fatalf("no coordinate: %v, %d capped", st, tb.Capped)
	}
	// Without a Bound, the claim displaces the liar itself (7 ms, the least).
	tb.Bound = nil
	if st, d := tb.Admit(t0, "n", maxRegret, ClientCoord{}); st != Accepted || d != "liar" || tb.Capped != 3 {
		t.Fatalf("no bound: %v, displaced %q, %d capped", st, d, tb.Capped)
	}
}
