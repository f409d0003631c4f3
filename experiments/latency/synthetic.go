package latency

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
)

// SyntheticConfig shapes a generated latency space: points in a plane (or
// more dimensions), optionally gathered into clusters, plus a per-host access
// delay added at both ends of every path, as last-mile links add it.
type SyntheticConfig struct {
	// Dims of the point space. Default 2.
	Dims int
	// Side of the cube the points (or cluster centres) fall in, in ms of RTT.
	// Default 150.
	Side float64
	// Clusters gathers points around this many centres; 0 spreads them
	// uniformly.
	Clusters int
	// ClusterSpread is the standard deviation of a point around its centre
	// (ms). Default 10.
	ClusterSpread float64
	// AccessMean is the mean access delay of a host (ms, each end of a path).
	// Default 5.
	AccessMean float64
	// HeavyTail draws access delays from a Pareto distribution (shape 1.5)
	// with the same mean instead of an exponential, so a few hosts sit behind
	// very slow links.
	HeavyTail bool
}

// DefaultSyntheticConfig is a plane of 150 ms with 5 ms mean access delays.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{Dims: 2, Side: 150, ClusterSpread: 10, AccessMean: 5}
}

// Synthetic is a generated latency space. It stores O(n) numbers, so it
// serves swarms and simulations far larger than any matrix.
type Synthetic struct {
	Name   string
	dims   int
	pos    []float64 // n*dims
	access []float64
}

// NewSynthetic generates n hosts from cfg with a seeded source; the same
// (n, seed, cfg) always gives the same space.
func NewSynthetic(n int, seed int64, cfg SyntheticConfig) *Synthetic {
	d := DefaultSyntheticConfig()
	if cfg.Dims <= 0 {
		cfg.Dims = d.Dims
	}
	if cfg.Side <= 0 {
		cfg.Side = d.Side
	}
	if cfg.ClusterSpread <= 0 {
		cfg.ClusterSpread = d.ClusterSpread
	}
	if cfg.AccessMean < 0 {
		cfg.AccessMean = 0
	}
	rng := rand.New(rand.NewSource(seed))
	s := &Synthetic{
		Name:   fmt.Sprintf("synthetic(n=%d,seed=%d,clusters=%d,heavytail=%v)", n, seed, cfg.Clusters, cfg.HeavyTail),
		dims:   cfg.Dims,
		pos:    make([]float64, n*cfg.Dims),
		access: make([]float64, n),
	}
	centres := make([]float64, cfg.Clusters*cfg.Dims)
	for i := range centres {
		centres[i] = rng.Float64() * cfg.Side
	}
	for i := 0; i < n; i++ {
		if cfg.Clusters > 0 {
			c := rng.Intn(cfg.Clusters)
			for k := 0; k < cfg.Dims; k++ {
				s.pos[i*cfg.Dims+k] = centres[c*cfg.Dims+k] + rng.NormFloat64()*cfg.ClusterSpread
			}
		} else {
			for k := 0; k < cfg.Dims; k++ {
				s.pos[i*cfg.Dims+k] = rng.Float64() * cfg.Side
			}
		}
		if cfg.HeavyTail {
			// Pareto with shape a has mean a*xm/(a-1); pick xm for the mean.
			const a = 1.5
			xm := cfg.AccessMean * (a - 1) / a
			s.access[i] = xm / math.Pow(1-rng.Float64(), 1/a)
		} else {
			s.access[i] = rng.ExpFloat64() * cfg.AccessMean
		}
	}
	return s
}

// Len is the number of hosts.
func (s *Synthetic) Len() int { return len(s.access) }

// RTT is the distance between the two points plus both access delays, at
// least 0.1 ms between distinct hosts.
func (s *Synthetic) RTT(i, j int) float64 {
	if i == j {
		return 0
	}
	var sum float64
	a, b := s.pos[i*s.dims:(i+1)*s.dims], s.pos[j*s.dims:(j+1)*s.dims]
	for k := range a {
		d := a[k] - b[k]
		sum += d * d
	}
	return math.Max(0.1, math.Sqrt(sum)+s.access[i]+s.access[j])
}

// ParseSyntheticSpec reads the spec the CLI and the experiments take for a
// generated space: "synthetic", optionally followed by ":" and a comma list
// of "clusters" (8 clusters) and "heavytail". ok is false when spec names
// no synthetic space (a matrix name or file, say).
func ParseSyntheticSpec(spec string) (cfg SyntheticConfig, ok bool, err error) {
	kind, ok := strings.CutPrefix(spec, "synthetic")
	if !ok || (kind != "" && kind[0] != ':') {
		return SyntheticConfig{}, false, nil
	}
	cfg = DefaultSyntheticConfig()
	for _, opt := range strings.Split(strings.TrimPrefix(kind, ":"), ",") {
		switch opt {
		case "":
		case "clusters":
			cfg.Clusters = 8
		case "heavytail":
			cfg.HeavyTail = true
		default:
			return SyntheticConfig{}, true, fmt.Errorf("unknown synthetic option %q (clusters, heavytail)", opt)
		}
	}
	return cfg, true, nil
}
