package vivaldieval

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// TestTune prints ours vs serf for a config given in VIVALDI_TUNE
// ("dims=4,cc=0.25,..."; "cps=10+20+32" scores extra rounds, "seeds=4"
// averages seeds seed..seed+3, NOSERF=1 skips the baseline); it is how the
// defaults were chosen and is skipped unless that variable is set.
func TestTune(t *testing.T) {
	spec, ok := os.LookupEnv("VIVALDI_TUNE")
	if !ok {
		t.Skip("set VIVALDI_TUNE to run")
	}
	cfg := vivaldi.DefaultConfig()
	seed, rounds, sched, noserf, jitter := int64(1), 500, "random", os.Getenv("NOSERF") != "", 0.0
	mats := []string{"planetlab-490", "seattle-99"}
	nseeds := 1
	var cps []int // checkpoints besides the last; nil is DefaultCheckpoints
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "dims":
			cfg.Dimensions = int(f)
		case "cc":
			cfg.CC = f
		case "ce":
			cfg.CE = f
		case "ccstart":
			cfg.CCStart = f
		case "filter":
			cfg.LatencyFilterSize = int(f)
		case "rho":
			cfg.GravityRho = f
		case "win":
			cfg.NeighborWindow = int(f)
		case "nerr":
			cfg.SettledError = f
		case "clip":
			cfg.ResidualClip = f
		case "jitter":
			jitter = f
		case "hs":
			cfg.HeightShare = f
		case "rel":
			cfg.RelativeForce = f
		case "hstart":
			cfg.StartHeight = f
		case "hstartn":
			cfg.StartHeightSamples = int(f)
		case "ccn":
			cfg.CCStartSamples = int(f)
		case "econf":
			cfg.EarlyConfidence = f
		case "emax":
			cfg.ErrorMax = f
		case "cps":
			cps = nil
			for _, r := range strings.Split(v, "+") {
				n, err := strconv.Atoi(r)
				if err != nil {
					t.Fatalf("cps: %v", err)
				}
				cps = append(cps, n)
			}
		case "seed":
			seed = int64(f)
		case "seeds":
			nseeds = int(f)
		case "rounds":
			rounds = int(f)
		case "sched":
			sched = v
		case "mat":
			mats = strings.Split(v, "+")
		case "":
		default:
			t.Fatalf("unknown key %q", k)
		}
	}
	for _, name := range mats {
		var m latency.RTTs
		var err error
		switch name {
		case "clusters":
			m = latency.NewSynthetic(400, seed, latency.SyntheticConfig{Clusters: 8})
		case "heavytail":
			m = latency.NewSynthetic(400, seed, latency.SyntheticConfig{HeavyTail: true})
		default:
			m, err = latency.Open(name)
		}
		if err != nil {
			t.Fatal(err)
		}
		var sum []Checkpoint
		for k := 0; k < nseeds; k++ {
			r, err := Run(Options{Matrix: m, Name: name, Rounds: rounds, Schedule: sched, Seed: seed + int64(k), Config: &cfg, Checkpoints: cps, NoSerf: noserf, Jitter: jitter})
			if err != nil {
				t.Fatal(err)
			}
			if sum == nil {
				sum = make([]Checkpoint, len(r.Checkpoints))
			}
			for i, c := range r.Checkpoints {
				sum[i].Round = c.Round
				sum[i].Median += c.Median / float64(nseeds)
				sum[i].P90 += c.P90 / float64(nseeds)
				sum[i].SerfMedian += c.SerfMedian / float64(nseeds)
				sum[i].SerfP90 += c.SerfP90 / float64(nseeds)
			}
		}
		line := fmt.Sprintf("%-14s", name)
		for _, c := range sum {
			line += fmt.Sprintf(" r%d %.3f/%.3f (%.3f/%.3f)", c.Round, c.Median, c.P90, c.SerfMedian, c.SerfP90)
		}
		fmt.Println(line)
	}
}
