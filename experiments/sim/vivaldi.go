package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// VivaldiOptions describe a Vivaldi simulation.
type VivaldiOptions struct {
	// RTT is the peers' latency space (one peer per index). Missing pairs are
	// never sampled nor scored.
	RTT latency.RTTs
	// Seed drives neighbour choice, timer offsets and pair sampling.
	Seed int64
	// Rounds: every peer samples one neighbour per Interval, Rounds times.
	Rounds int
	// Interval between two samples of one peer (default 1 s of virtual time).
	Interval time.Duration
	// Near and Random are the sizes of each peer's neighbour set: the Near
	// lowest-RTT of NearSample random candidates and Random uniform peers
	// (default 16, 16, 128). A peer alternates between the two halves.
	Near, Random, NearSample int
	// Config is the model's; nil is vivaldi.DefaultConfig().
	Config *vivaldi.Config
	// Checkpoints are the rounds at which the error is scored (besides the
	// last).
	Checkpoints []int
	// ErrorPairs is how many random pairs a checkpoint scores; 0 scores all
	// pairs up to 2000 peers and 200 000 random pairs beyond.
	ErrorPairs int
	// Progress, if set, is called after every round.
	Progress func(round, rounds int)
	// Answer, if set, is how peer j answers a request from peer i, which
	// carried i's coordinate caller: with the coordinate it sends (honest
	// is its own as it is then) and a delay it adds before answering (a
	// peer can delay its answer, not hasten it; ≤ 0 is none); now is the
	// virtual time. Nil: every peer answers honestly at once. Simulated
	// adversaries (liars.go).
	Answer func(now time.Duration, i, j int, honest, caller vivaldi.Coord, rtt time.Duration) (vivaldi.Coord, time.Duration)
	// Updated, if set, is told the outcome of every sample: peer i's
	// Update with j's answer, err nil if it was applied.
	Updated func(i, j int, err error)
}

// VivaldiCheckpoint is the relative embedding error |predicted − true| /
// true at one round.
type VivaldiCheckpoint struct {
	Round  int     `json:"round"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
}

// VivaldiResult is the outcome of SimulateVivaldi.
type VivaldiResult struct {
	Nodes       int                 `json:"nodes"`
	Rounds      int                 `json:"rounds"`
	Updates     uint64              `json:"updates"`
	Refused     uint64              `json:"refused"`
	Messages    uint64              `json:"messages"`
	Events      uint64              `json:"events"`
	Pairs       int                 `json:"pairs_scored"`
	Checkpoints []VivaldiCheckpoint `json:"checkpoints"`
	// Coords are the final coordinates; Neighbors each peer's neighbours.
	Coords    []vivaldi.Coord `json:"-"`
	Neighbors [][]int32       `json:"-"`
}

// Neighbors picks each peer's Vivaldi neighbours as SimulateVivaldi does:
// the near lowest-RTT peers among nearSample random candidates, then random
// uniform peers, without repeats and never itself. O(n·(nearSample+random)).
func Neighbors(rtt latency.RTTs, near, random, nearSample int, rng *rand.Rand) [][]int32 {
	n := rtt.Len()
	out := make([][]int32, n)
	type cand struct {
		j int32
		d float64
	}
	cs := make([]cand, 0, nearSample)
	for i := 0; i < n; i++ {
		cs = cs[:0]
		for s := 0; s < nearSample; s++ {
			j := rng.Intn(n)
			if d := rtt.RTT(i, j); j != i && d > 0 {
				cs = append(cs, cand{int32(j), d})
			}
		}
		// Partial selection sort: near is small.
		nb := make([]int32, 0, near+random)
		has := func(j int32) bool {
			for _, x := range nb {
				if x == j {
					return true
				}
			}
			return false
		}
		for len(nb) < near && len(cs) > 0 {
			b := 0
			for k := range cs {
				if cs[k].d < cs[b].d || (cs[k].d == cs[b].d && cs[k].j < cs[b].j) {
					b = k
				}
			}
			if !has(cs[b].j) {
				nb = append(nb, cs[b].j)
			}
			cs[b] = cs[len(cs)-1]
			cs = cs[:len(cs)-1]
		}
		for tries := 0; len(nb) < near+random && tries < 4*(near+random); tries++ {
			j := int32(rng.Intn(n))
			if int(j) != i && !has(j) && rtt.RTT(i, int(j)) > 0 {
				nb = append(nb, j)
			}
		}
		out[i] = nb
	}
	return out
}

// SimulateVivaldi runs the Vivaldi model on every peer of o.RTT: each peer,
// every Interval, sends a request carrying its coordinate to one neighbour;
// the request arrives RTT/2 later and the neighbour replies with its own
// coordinate as it is then; the reply arrives RTT/2 after that and the
// caller updates its vivaldi.Client with the neighbour's coordinate and the
// RTT, as vivaldi.Service does.
func SimulateVivaldi(o VivaldiOptions) (*VivaldiResult, error) {
	if o.RTT == nil || o.RTT.Len() < 2 {
		return nil, errors.New("sim: vivaldi needs at least 2 peers")
	}
	if o.Rounds <= 0 {
		return nil, fmt.Errorf("sim: vivaldi rounds %d must be positive", o.Rounds)
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Near == 0 && o.Random == 0 {
		o.Near, o.Random = 16, 16
	}
	if o.NearSample <= 0 {
		o.NearSample = 128
	}
	cfg := vivaldi.DefaultConfig()
	if o.Config != nil {
		cfg = *o.Config
	}
	n := o.RTT.Len()
	rng := rand.New(rand.NewSource(o.Seed))
	nbrs := Neighbors(o.RTT, o.Near, o.Random, o.NearSample, rng)
	clients := make([]*vivaldi.Client, n)
	names := make([]string, n)
	for i := range clients {
		c, err := vivaldi.NewClient(cfg, rand.New(rand.NewSource(o.Seed*7919+int64(i))))
		if err != nil {
			return nil, err
		}
		clients[i] = c
		names[i] = strconv.Itoa(i)
	}
	res := &VivaldiResult{Nodes: n, Rounds: o.Rounds, Neighbors: nbrs}
	net := NewNet(o.RTT)
	sampleRng := rand.New(rand.NewSource(o.Seed ^ 0x51f15eed))
	count := make([]uint32, n)
	ticks := make([]func(), n) // one closure per peer, not one per sample
	var tick func(i int)
	tick = func(i int) {
		nb := nbrs[i]
		if len(nb) == 0 {
			return
		}
		// Alternate the near and the random half, as the live protocol mixes
		// near and random peers.
		half := min(o.Near, len(nb))
		var j int
		switch {
		case count[i]%2 == 0 && half > 0:
			j = int(nb[sampleRng.Intn(half)])
		case len(nb) > half:
			j = int(nb[half+sampleRng.Intn(len(nb)-half)])
		default:
			j = int(nb[sampleRng.Intn(len(nb))])
		}
		count[i]++
		rtt := time.Duration(o.RTT.RTT(i, j) * float64(time.Millisecond))
		if o.Answer != nil {
			ci := clients[i].GetCoordinate()
			net.Send(i, j, func() {
				cj, extra := o.Answer(net.Now(), i, j, clients[j].GetCoordinate(), ci, rtt)
				extra = max(extra, 0)
				reply := func() {
					net.Send(j, i, func() {
						err := clients[i].Update(names[j], cj, rtt+extra)
						if err != nil {
							res.Refused++
						} else {
							res.Updates++
						}
						if o.Updated != nil {
							o.Updated(i, j, err)
						}
					})
				}
				if extra > 0 {
					net.After(extra, reply)
				} else {
					reply()
				}
			})
		} else {
			net.Send(i, j, func() {
				cj := clients[j].GetCoordinate()
				net.Send(j, i, func() {
					err := clients[i].Update(names[j], cj, rtt)
					if err != nil {
						res.Refused++
					} else {
						res.Updates++
					}
					if o.Updated != nil {
						o.Updated(i, j, err)
					}
				})
			})
		}
		if int(count[i]) < o.Rounds {
			net.After(o.Interval, ticks[i])
		}
	}
	for i := 0; i < n; i++ {
		ticks[i] = func() { tick(i) }
		net.At(time.Duration(rng.Int63n(int64(o.Interval))), ticks[i])
	}
	want := map[int]bool{o.Rounds: true}
	for _, r := range o.Checkpoints {
		if r > 0 && r < o.Rounds {
			want[r] = true
		}
	}
	pairs := scorePairs(n, o.ErrorPairs, rand.New(rand.NewSource(o.Seed^0x9a125)))
	res.Pairs = len(pairs)
	for r := 1; r <= o.Rounds; r++ {
		net.RunUntil(time.Duration(r) * o.Interval)
		if r == o.Rounds {
			// Let the last replies land.
			net.RunUntil(time.Duration(r)*o.Interval + 20*time.Second)
		}
		if want[r] {
			med, p90 := pairErrors(o.RTT, clients, pairs)
			res.Checkpoints = append(res.Checkpoints, VivaldiCheckpoint{Round: r, Median: med, P90: p90})
		}
		if o.Progress != nil {
			o.Progress(r, o.Rounds)
		}
	}
	res.Messages = net.Messages
	res.Events = net.Processed
	res.Coords = make([]vivaldi.Coord, n)
	for i, c := range clients {
		res.Coords[i] = c.GetCoordinate()
	}
	return res, nil
}

// scorePairs lists the pairs a checkpoint scores.
func scorePairs(n, m int, rng *rand.Rand) [][2]int32 {
	if m == 0 && n <= 2000 {
		out := make([][2]int32, 0, n*(n-1)/2)
		for i := 0; i < n; i++ {
			for j := i + 1; j < n; j++ {
				out = append(out, [2]int32{int32(i), int32(j)})
			}
		}
		return out
	}
	if m == 0 {
		m = 200_000
	}
	out := make([][2]int32, 0, m)
	for len(out) < m {
		i, j := rng.Intn(n), rng.Intn(n)
		if i != j {
			out = append(out, [2]int32{int32(i), int32(j)})
		}
	}
	return out
}

func pairErrors(rtt latency.RTTs, clients []*vivaldi.Client, pairs [][2]int32) (med, p90 float64) {
	coords := make([]vivaldi.Coord, len(clients))
	for i, c := range clients {
		coords[i] = c.GetCoordinate()
	}
	return CoordErrors(rtt, coords, pairs)
}

// CoordErrors is the median and p90 relative error of coords against rtt
// over pairs (all pairs when pairs is nil).
func CoordErrors(rtt latency.RTTs, coords []vivaldi.Coord, pairs [][2]int32) (med, p90 float64) {
	if pairs == nil {
		pairs = scorePairs(len(coords), 0, rand.New(rand.NewSource(1)))
	}
	errs := make([]float64, 0, len(pairs))
	for _, p := range pairs {
		tr := rtt.RTT(int(p[0]), int(p[1]))
		if tr <= 0 {
			continue
		}
		pr := coords[p[0]].DistanceTo(coords[p[1]]) * 1000
		errs = append(errs, math.Abs(pr-tr)/tr)
	}
	ps := metrics.Percentiles(errs, 0.5, 0.9)
	return ps[0], ps[1]
}
