package elections

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/sim"
)

// Bully is Garcia-Molina's election on a complete graph in which every
// process knows every other's ID. A process holds an election by sending
// ELECTION to every process with a higher ID; each that is up answers OK
// and, unless it is already holding one, holds an election of its own. A
// process that gets no OK within T (a round trip at the largest delay and a
// margin) is the highest live one: it sends COORDINATOR to every lower
// process. One that gets an OK but no COORDINATOR within T' holds its
// election again.
//
// A process starts an election when it initiates at time 0 or recovers
// (the runner makes it anew and starts it). A Wake is a process noticing
// that its coordinator no longer responds: as in Coulouris et al., it
// sends no ELECTION to the coordinator it knows has failed, so the
// second-highest process noticing the highest's failure wins at once with
// n−2 COORDINATOR messages. Before any election a process takes the
// highest ID for the coordinator (the previous term's, by the algorithm's
// own rule).
//
// Elections are told apart by a wave, the process that started one and
// when: a process takes part in a wave once, so a late ELECTION of an
// election it has finished is only answered. With delays that keep the
// triangle inequality (the synthetic plane does) the lowest process
// starting an election alone with all up costs n(n−1)/2 ELECTION, as many
// OK and n−1 COORDINATOR messages: n²−1 in all.
//
// As in the textbook, a process that recovers while an election is under
// way can race a lower process's COORDINATOR; the scenarios here recover
// processes after the elections have ended.
type bully struct {
	cfg    Config
	leader int
	// known is the coordinator this process takes to be in office, -1 for
	// none.
	known   int
	started bool
	phase   bullyPhase
	// wave is the election this process is holding; seq numbers its waits,
	// so that a timer of an earlier wait is ignored.
	wave   bullyWave
	seq    int
	joined map[bullyWave]bool
}

type bullyPhase int

const (
	bullyIdle      bullyPhase = iota
	bullyAwaitOK              // ELECTION sent, waiting T for an OK
	bullyAwaitCoor            // OK received, waiting T' for COORDINATOR
)

// bullyMargin is added to the round trip at the largest delay to make T.
const bullyMargin = time.Millisecond

// bullyWave names one election: the process that started it and when.
type bullyWave struct {
	Origin int
	At     time.Duration
}

type bullyElection struct{ Wave bullyWave }
type bullyOK struct{}
type bullyCoordinator struct {
	Wave bullyWave
	ID   int
}

func (bullyElection) Kind() string    { return "ELECTION" }
func (bullyOK) Kind() string          { return "OK" }
func (bullyCoordinator) Kind() string { return "COORDINATOR" }
func (m bullyElection) String() string {
	return fmt.Sprintf("election of node %d at %v", m.Wave.Origin, m.Wave.At)
}
func (m bullyCoordinator) String() string { return fmt.Sprintf("coordinator id %d", m.ID) }

func newBully(c Config) Node {
	b := &bully{cfg: c, leader: -1, known: -1, joined: map[bullyWave]bool{}}
	for j, id := range c.IDs {
		if b.known < 0 || id > c.IDs[b.known] {
			b.known = j
		}
	}
	return b
}

// t is how long a process waits for an OK; t' (twice t) how long for the
// COORDINATOR after one: time enough for the highest live process to hear
// of the election, wait t itself and announce.
func (b *bully) t() time.Duration { return 2*b.cfg.MaxDelay + bullyMargin }

func (b *bully) Start(now time.Duration, o *Out) {
	first := !b.started
	b.started = true
	switch {
	case first && (b.cfg.Initiator || now > 0):
		b.hold(bullyWave{b.cfg.Index, now}, -1, o)
	case !first && b.phase == bullyIdle:
		// The coordinator no longer responds.
		failed := -1
		if b.known != b.cfg.Index {
			failed = b.known
		}
		if b.leader == failed {
			b.leader = -1
		}
		b.hold(bullyWave{b.cfg.Index, now}, failed, o)
	}
}

// hold is this process's part in election w: ELECTION to every higher
// process but skip, or victory at once if there is none.
func (b *bully) hold(w bullyWave, skip int, o *Out) {
	b.joined[w] = true
	b.wave = w
	b.seq++
	asked := false
	for j, id := range b.cfg.IDs {
		if id > b.cfg.ID && j != skip {
			o.Send(j, bullyElection{Wave: w})
			asked = true
		}
	}
	if !asked {
		b.win(o)
		return
	}
	b.phase = bullyAwaitOK
	o.After(b.t(), b.seq)
}

// win makes this process the coordinator and tells every lower one.
func (b *bully) win(o *Out) {
	b.phase = bullyIdle
	b.seq++
	b.leader, b.known = b.cfg.Index, b.cfg.Index
	for j, id := range b.cfg.IDs {
		if id < b.cfg.ID {
			o.Send(j, bullyCoordinator{Wave: b.wave, ID: b.cfg.ID})
		}
	}
}

func (b *bully) Receive(_ time.Duration, from int, m Message, o *Out) {
	switch m := m.(type) {
	case bullyElection:
		o.Send(from, bullyOK{})
		if !b.joined[m.Wave] {
			b.joined[m.Wave] = true
			if b.phase == bullyIdle {
				b.hold(m.Wave, -1, o)
			}
		}
	case bullyOK:
		if b.phase == bullyAwaitOK {
			b.phase = bullyAwaitCoor
			b.seq++
			o.After(2*b.t(), b.seq)
		}
	case bullyCoordinator:
		// Only higher processes send COORDINATOR to this one.
		b.joined[m.Wave] = true
		b.leader, b.known = from, from
		b.phase = bullyIdle
		b.seq++
	}
}

func (b *bully) Timeout(now time.Duration, tag int, o *Out) {
	if tag != b.seq {
		return
	}
	switch b.phase {
	case bullyAwaitOK:
		b.win(o)
	case bullyAwaitCoor:
		// The process that answered has gone before announcing.
		b.hold(bullyWave{b.cfg.Index, now}, -1, o)
	}
}

func (b *bully) Leader() int { return b.leader }

// bullyRanks are a seeded permutation of IDs 1..n and the indices of the
// highest and second-highest (-1 when n < 2) and the lowest ID.
func bullyRanks(n int, seed int64) (ids []int, top, second, low int) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x62756c6c79))
	ids = make([]int, n)
	top, second = -1, -1
	for i, p := range rng.Perm(n) {
		ids[i] = p + 1
		if p == 0 {
			low = i
		}
		switch p + 1 {
		case n:
			top = i
		case n - 1:
			second = i
		}
	}
	return ids, top, second, low
}

// bullyMaxDelay is the largest one-way delay between sc's nodes, as the
// runner gives it to them in Config.MaxDelay.
func bullyMaxDelay(sc Scenario) time.Duration {
	rtt := sc.RTT
	if rtt == nil {
		rtt = latency.NewSynthetic(sc.N, sc.Seed, latency.DefaultSyntheticConfig())
	}
	var md time.Duration
	for i := 0; i < sc.N; i++ {
		for j := i + 1; j < sc.N; j++ {
			md = max(md, sim.Delay(rtt, i, j))
		}
	}
	return md
}

func init() {
	sizes, quick := []int{8, 16, 32, 64, 128, 256, 512}, []int{16, 64}
	worst := func(n int) float64 { return float64(n*n - 1) }
	for _, v := range []struct {
		variant, summary string
		scenario         func(n int, seed int64) Scenario
		bound            func(n int) float64
	}{
		{"", "complete graph, synchronous timeouts, crash-stop: the highest ID crashed, a random lower process starts the election; one coordinator, the highest live ID; bound the worst case n²−1",
			func(n int, seed int64) Scenario {
				ids, top, second, _ := bullyRanks(n, seed)
				sc := Scenario{N: n, Seed: seed, Topology: Complete, IDs: ids, Initiators: []int{top}}
				if n >= 2 {
					sc.Faults = []Fault{{At: 0, Kind: Crash, Node: top}}
					sc.Initiators = []int{bullyPick(ids, seed, top, second)}
				}
				return sc
			}, worst},
		{"worst", "all up, the lowest ID starts the election: n(n−1)/2 ELECTION, n(n−1)/2 OK and n−1 COORDINATOR, n²−1 messages exactly",
			func(n int, seed int64) Scenario {
				ids, _, _, low := bullyRanks(n, seed)
				return Scenario{N: n, Seed: seed, Topology: Complete, IDs: ids, Initiators: []int{low}}
			}, worst},
		{"best", "the highest ID crashed, the second-highest notices and wins at once: n−2 COORDINATOR messages exactly, nothing else",
			func(n int, seed int64) Scenario {
				ids, top, second, _ := bullyRanks(n, seed)
				sc := Scenario{N: n, Seed: seed, Topology: Complete, IDs: ids, Initiators: []int{},
					Faults: []Fault{{At: 0, Kind: Wake, Node: top}}}
				if n >= 2 {
					sc.Faults = []Fault{{At: 0, Kind: Crash, Node: top}, {At: 0, Kind: Wake, Node: second}}
				}
				return sc
			}, func(n int) float64 { return float64(max(n-2, 0)) }},
		{"crash-mid", "the highest ID crashed, the would-be winner (second-highest) crashes while it waits for OKs, one of the two recovers later; still one coordinator, the highest live ID (several elections: no bound)",
			bullyCrashMid, nil},
	} {
		register(Algorithm{
			Name: "bully", Variant: v.variant, Summary: v.summary,
			Scenario: v.scenario, New: newBully, Check: CheckMaxID, Bound: v.bound,
			Sizes: sizes, Quick: quick,
		})
	}
}

// bullyPick is a seeded random process other than the highest and the
// second-highest (other than the highest only, when n = 2).
func bullyPick(ids []int, seed int64, top, second int) int {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7069636b))
	var low []int
	for i := range ids {
		if i != top && (i != second || len(ids) < 3) {
			low = append(low, i)
		}
	}
	return low[rng.IntN(len(low))]
}

// bullyCrashMid: the highest ID is down from the start and a random lower
// process starts an election; the second-highest, which would win, hears
// of it within the largest delay and crashes before its wait T is over,
// having answered OK but sent no COORDINATOR; the processes waiting for it
// time out and elect the third-highest. Well after, the highest or the
// second-highest (seeded) recovers and takes over.
func bullyCrashMid(n int, seed int64) Scenario {
	ids, top, second, _ := bullyRanks(n, seed)
	sc := Scenario{N: n, Seed: seed, Topology: Complete, IDs: ids}
	md := bullyMaxDelay(sc)
	t := (&bully{cfg: Config{MaxDelay: md}}).t()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6d6964))
	winner := top
	if n >= 2 {
		winner = second
		sc.Faults = append(sc.Faults, Fault{At: 0, Kind: Crash, Node: top})
	}
	sc.Initiators = []int{winner}
	if n >= 3 {
		sc.Initiators = []int{bullyPick(ids, seed, top, second)}
	}
	crash := md + 1 + time.Duration(rng.Int64N(int64(t-md-1)))
	back := winner
	if rng.IntN(2) == 0 {
		back = top
	}
	sc.Faults = append(sc.Faults,
		Fault{At: crash, Kind: Crash, Node: winner},
		Fault{At: 20*t + time.Duration(rng.Int64N(int64(t))), Kind: Recover, Node: back})
	return sc
}
