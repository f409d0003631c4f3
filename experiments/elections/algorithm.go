package elections

import (
	"fmt"
	"math/rand/v2"
	"sort"
)

// Algorithm is one election model the experiments run by name.
type Algorithm struct {
	// Name is the algorithm ("bully", "lcr", ...); Variant a named setting
	// of it ("" for the plain one; "worst", "no-fence", ...).
	Name, Variant string
	// Summary is one line on the model and the property checked.
	Summary string
	// Scenario makes the run of n nodes at seed under the algorithm's
	// failure model: topology, initiators, IDs and faults.
	Scenario func(n int, seed int64) Scenario
	// New makes a node.
	New func(Config) Node
	// Check judges a finished run.
	Check func(Result) Verdict
	// Bound is the message bound to plot against at n nodes (the textbook
	// worst case unless the variant says otherwise); nil: none.
	Bound func(n int) float64
	// BoundKinds are the message kinds the bound counts (nil: every
	// message); e.g. LCR's bound counts its ELECTION messages, not the
	// announcement of the winner.
	BoundKinds []string
	// Sizes are the n the experiment runs, small to large, and Quick the
	// two of a quick run.
	Sizes, Quick []int
}

// Key is "name" or "name/variant".
func (a Algorithm) Key() string {
	if a.Variant == "" {
		return a.Name
	}
	return a.Name + "/" + a.Variant
}

// Run runs the algorithm at n nodes and seed and checks the result.
func (a Algorithm) Run(n int, seed int64, trace bool) (Result, Verdict, error) {
	sc := a.Scenario(n, seed)
	sc.Trace = trace
	r, err := Run(sc, a.New)
	if err != nil {
		return r, Verdict{}, fmt.Errorf("%s n=%d seed %d: %w", a.Key(), n, seed, err)
	}
	return r, a.Check(r), nil
}

// Counted is the messages of r the bound counts.
func (a Algorithm) Counted(r Result) int {
	if a.BoundKinds == nil {
		return r.Messages
	}
	c := 0
	for _, k := range a.BoundKinds {
		c += r.ByKind[k]
	}
	return c
}

var algorithms = map[string]Algorithm{}

// register adds an algorithm; each algorithm's file registers its
// variants in init.
func register(a Algorithm) {
	if _, dup := algorithms[a.Key()]; dup {
		panic("elections: " + a.Key() + " registered twice")
	}
	if a.Scenario == nil || a.New == nil || a.Check == nil || len(a.Sizes) == 0 || len(a.Quick) == 0 {
		panic("elections: " + a.Key() + " incomplete")
	}
	algorithms[a.Key()] = a
}

// Algorithms lists every registered algorithm and variant, by key.
func Algorithms() []Algorithm {
	out := make([]Algorithm, 0, len(algorithms))
	for _, a := range algorithms {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Lookup finds the algorithms named name (every variant), or the one
// "name/variant".
func Lookup(name string) []Algorithm {
	var out []Algorithm
	for _, a := range Algorithms() {
		if a.Name == name || a.Key() == name {
			out = append(out, a)
		}
	}
	return out
}

// CrashSome picks k distinct nodes of n other than keep to crash, seeded.
func CrashSome(n, k int, seed int64, keep ...int) []int {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6372617368))
	skip := map[int]bool{}
	for _, i := range keep {
		skip[i] = true
	}
	var out []int
	for _, i := range rng.Perm(n) {
		if len(out) == k {
			break
		}
		if !skip[i] {
			out = append(out, i)
		}
	}
	return out
}
