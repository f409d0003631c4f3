package sim

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Method is a selection method in the simulator, under the name it has in
// the library's registry (superpeer.Lookup): the simulator's side of a
// method. Prefix and repel register here; a method of one's own registers
// both sides.
type Method struct {
	Name string
	// Simulate runs the method on every peer of env and returns where it
	// settled.
	Simulate func(env Env) (Outcome, error)
}

// Env is one simulated network: the peers, their latency space and
// identities, and what the method is asked for.
type Env struct {
	RTT  latency.RTTs
	IDs  []peer.ID
	Keys []dht.Key
	// Superpeers is S; Capacity is C (0: unbounded).
	Superpeers, Capacity int
	Seed                 int64
	// Coords and Neighbors are the peers' Vivaldi coordinates and
	// neighbours after VivaldiRounds rounds of SimulateVivaldi, filled by
	// Run for a method with coordinates (superpeer.Method.Coordinates).
	Coords    []vivaldi.Coord
	Neighbors [][]int32
}

// Outcome is where a simulated method settled.
type Outcome struct {
	// Superpeers are the peers in the superpeer role, ascending.
	Superpeers []int
	// Assignment is every peer's superpeer (its own for a superpeer).
	Assignment metrics.Assignment
	// Seconds is the virtual time the method took to settle.
	Seconds float64
}

// VivaldiRounds is how many rounds of SimulateVivaldi Run gives a method
// with coordinates before it starts: the coordinates of `peer experiment
// repel`.
const VivaldiRounds = 1000

// ErrUnknownMethod is returned by Run for a method without a simulator side.
var ErrUnknownMethod = errors.New("sim: no simulator for method")

var methods = struct {
	sync.RWMutex
	m map[string]Method
}{m: map[string]Method{}}

// Register adds a method's simulator side. It panics if the name is taken
// or Simulate is nil, as superpeer.Register does.
func Register(m Method) {
	if m.Name == "" || m.Simulate == nil {
		panic(fmt.Sprintf("sim: Register: method %q needs a name and Simulate", m.Name))
	}
	methods.Lock()
	defer methods.Unlock()
	if _, ok := methods.m[m.Name]; ok {
		panic(fmt.Sprintf("sim: Register: method %q registered twice", m.Name))
	}
	methods.m[m.Name] = m
}

// Run simulates the named method on env: it finds the method in the
// library's registry and its simulator side here, gives a method with
// coordinates VivaldiRounds of Vivaldi first (unless env has coordinates),
// and runs it.
func Run(name string, env Env) (Outcome, error) {
	lm, err := superpeer.Lookup(name)
	if err != nil {
		return Outcome{}, err
	}
	methods.RLock()
	m, ok := methods.m[name]
	methods.RUnlock()
	if !ok {
		return Outcome{}, fmt.Errorf("%w %q", ErrUnknownMethod, name)
	}
	if len(env.IDs) != env.RTT.Len() || len(env.Keys) != env.RTT.Len() {
		return Outcome{}, fmt.Errorf("sim: %d IDs and %d keys for %d peers", len(env.IDs), len(env.Keys), env.RTT.Len())
	}
	if lm.Coordinates && env.Coords == nil {
		vr, err := SimulateVivaldi(VivaldiOptions{RTT: env.RTT, Seed: env.Seed, Rounds: VivaldiRounds})
		if err != nil {
			return Outcome{}, err
		}
		env.Coords, env.Neighbors = vr.Coords, vr.Neighbors
	}
	return m.Simulate(env)
}

func init() {
	Register(Method{Name: "prefix", Simulate: func(env Env) (Outcome, error) {
		scheme, err := superpeer.Exact(env.Superpeers)
		if err != nil {
			return Outcome{}, err
		}
		r := Prefix(env.Keys, scheme, env.Capacity)
		return Outcome{Superpeers: r.Superpeers, Assignment: r.Assignment, Seconds: r.Seconds}, nil
	}})
	Register(Method{Name: "repel", Simulate: func(env Env) (Outcome, error) {
		ids := make([]string, len(env.IDs))
		for i, id := range env.IDs {
			ids[i] = string(id)
		}
		cfg := repel.DefaultConfig()
		cfg.Tokens = env.Superpeers
		cfg.MaxCandidates = 64 // as `peer experiment repel`
		r, err := SimulateRepel(RepelOptions{
			RTT: env.RTT, Coords: env.Coords, Neighbors: env.Neighbors, IDs: ids, Config: cfg, Seed: env.Seed,
			Attach: AttachSelector, Capacity: env.Capacity, Displace: superpeer.DefaultDisplace,
			Choose: RepelChoice(),
		})
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Superpeers: r.Superpeers, Assignment: r.Assignment, Seconds: r.SettledSeconds}, nil
	}})
}

// RepelChoice is the clients' choice in the experiments' token runs
// (`peer experiment repel`, growth): the selector's, measuring again every
// five renewals of the simulator's 15 s views.
func RepelChoice() repel.AttachConfig {
	c := repel.DefaultAttachConfig()
	c.ProbeEvery = 5 * 15 * time.Second
	return c
}
