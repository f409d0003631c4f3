package sim

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// The live swarm's token method (swarm.RepelSwarmConfig: 5 s surveys and
// settling, 3 s moves, a 9 s attachment TTL renewed every 3 s) in the
// simulator, on the 490-peer PlanetLab placements of `peer swarm --seed
// 1…5`, S = 8, capacity 124, scored as `peer swarm` scores it (tokens
// quiet for 4.5 s) and again after 30 s and 60 s of quiet; each placement
// with SWARMCONFIG_SEEDS simulator seeds. The yardstick of the live table
// in experiments/README.md ("Scored at rest"):
//
//	SWARMCONFIG_SEEDS=4 go test ./experiments/sim -run TestRepelSwarmConfig_Placement -v
func TestRepelSwarmConfig_Placement(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("SWARMCONFIG_SEEDS"))
	if runs <= 0 {
		t.Skip("SWARMCONFIG_SEEDS=N runs the live swarm's configuration in the simulator, N simulator seeds a placement")
	}
	const n, S, capacity = 490, 8, 124
	for _, quiet := range []time.Duration{4500 * time.Millisecond, 30 * time.Second, time.Minute} {
		sum, worst, count := 0.0, 0.0, 0
		for place := int64(1); place <= 5; place++ {
			rtt := planetlab(t, n, place)
			vr, err := SimulateVivaldi(VivaldiOptions{RTT: rtt, Seed: place, Rounds: VivaldiRounds})
			if err != nil {
				t.Fatal(err)
			}
			pids, _, err := Identities(place, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, n)
			for i, id := range pids {
				ids[i] = string(id)
			}
			km := metrics.KMedianCost(rtt, metrics.GreedyKMedian(rtt, S))
			line := ""
			for run := int64(1); run <= int64(runs); run++ {
				choose := repel.DefaultAttachConfig()
				choose.ProbeEvery = 5 * 3 * time.Second // five renewals of the 9 s TTL
				r, err := SimulateRepel(RepelOptions{RTT: rtt, Coords: vr.Coords, Neighbors: vr.Neighbors, IDs: ids,
					Config: swarm.RepelSwarmConfig(S, repel.Attract), Seed: 100*run + place,
					Attach: AttachSelector, Capacity: capacity, Displace: superpeer.DefaultDisplace, Choose: choose,
					Quiet: quiet, ViewEvery: 3 * time.Second, TickEvery: 500 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if !r.Settled || len(r.Superpeers) != S {
					t.Fatalf("placement %d, run %d: settled %v with %d superpeers", place, run, r.Settled, len(r.Superpeers))
				}
				p := metrics.KMedianCost(rtt, r.Superpeers) / km
				sum, worst, count = sum+p, max(worst, p), count+1
				line += " " + strconv.FormatFloat(p, 'f', 3, 64) + " (" + strconv.FormatFloat(r.SettledSeconds, 'f', 0, 64) + " s)"
			}
			t.Logf("quiet %v, placement of seed %d:%s", quiet, place, line)
		}
		t.Logf("quiet %v: placement / greedy k-median mean %.3f, worst %.3f over %d runs", quiet, sum/float64(count), worst, count)
		if sum/float64(count) > 1.1 {
			t.Errorf("quiet %v: mean placement %.3f× the k-median, above 1.1×", quiet, sum/float64(count))
		}
	}
}
