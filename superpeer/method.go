package superpeer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// Method is a superpeer selection method as the tools find it: by name. A
// method's package registers it from an init function (prefix here, repel in
// package repel), so that importing the package is all a program does to
// offer it; `peer run`, `peer swarm` and the experiments build every
// method's selectors through New.
type Method struct {
	// Name is what --method takes: lower case, no spaces.
	Name string
	// Summary is one line for listings.
	Summary string
	// Coordinates is set for a method that places superpeers by network
	// coordinates: it runs a Vivaldi service (Env.Vivaldi, or its own).
	Coordinates bool
	// New builds the method's selector for the peer of node; Start runs
	// it, Close stops it (and whatever New made for it).
	New func(node *dht.Node, env Env) (Selector, error)
}

// Env is what every method's selector is built with. Fields left zero take
// the method's defaults.
type Env struct {
	// Superpeers is S, the number of superpeers wanted.
	Superpeers int
	// Attach configures the attach protocol: capacity C, TTL,
	// displacement, metrics (WithCapacity, WithTTL, WithDisplace, ...).
	// They apply after the method's own options.
	Attach []Option
	// Seed seeds the selector's randomness (0: the method's choice).
	Seed uint64
	// Vivaldi is the peer's coordinate service, for a method with
	// Coordinates; nil lets the method make its own, sampling the node's
	// routing table, and close it with the selector.
	Vivaldi *vivaldi.Service
	// Registerer, if set, receives the selector's metrics (and its attach
	// protocol's, unless Attach sets another) until Close.
	Registerer prometheus.Registerer
	// Options are the method's own options, of the type its package
	// documents ([]superpeer.Option for prefix, []repel.Option for repel),
	// or nil for its defaults; the fields above, where set, take
	// precedence over theirs.
	Options any
}

// ErrUnknownMethod is returned by Lookup for a name nobody registered.
var ErrUnknownMethod = errors.New("superpeer: unknown method")

// ErrMethodOptions is returned by a method's New when Env.Options is not of
// the method's type.
var ErrMethodOptions = errors.New("superpeer: options of another method")

var registry = struct {
	sync.RWMutex
	m map[string]Method
}{m: map[string]Method{}}

// Register makes a method available by its name. It panics if the name is
// empty or taken, or New is nil: registration runs at init, and two methods
// with one name is a programming error.
func Register(m Method) {
	if m.Name == "" || strings.ContainsAny(m.Name, " \t\n,") || m.New == nil {
		panic(fmt.Sprintf("superpeer: Register: method %q needs a name without spaces or commas, and New", m.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.m[m.Name]; ok {
		panic(fmt.Sprintf("superpeer: Register: method %q registered twice", m.Name))
	}
	registry.m[m.Name] = m
}

// Lookup finds a registered method; the error of an unknown name lists the
// known ones.
func Lookup(name string) (Method, error) {
	registry.RLock()
	m, ok := registry.m[name]
	registry.RUnlock()
	if !ok {
		return Method{}, fmt.Errorf("%w %q (registered: %s)", ErrUnknownMethod, name, strings.Join(methodNames(), ", "))
	}
	return m, nil
}

// Methods lists the registered methods, prefix and repel first (the two of
// Lo et al.), the others by name.
func Methods() []Method {
	registry.RLock()
	out := make([]Method, 0, len(registry.m))
	for _, m := range registry.m {
		out = append(out, m)
	}
	registry.RUnlock()
	rank := func(name string) int {
		switch name {
		case "prefix":
			return 0
		case "repel":
			return 1
		}
		return 2
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := rank(out[i].Name), rank(out[j].Name)
		if ri != rj {
			return ri < rj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// methodNames are the names of Methods, in its order.
func methodNames() []string {
	ms := Methods()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func init() {
	Register(Method{
		Name:    "prefix",
		Summary: "reserved top key bits: the superpeer of p is the peer responsible for key(p) AND mask; blind to latency",
		New: func(node *dht.Node, env Env) (Selector, error) {
			own, ok := env.Options.([]Option)
			if !ok && env.Options != nil {
				return nil, fmt.Errorf("%w: prefix takes []superpeer.Option, not %T", ErrMethodOptions, env.Options)
			}
			opts := append([]Option(nil), own...)
			if env.Registerer != nil {
				opts = append(opts, WithRegisterer(env.Registerer))
			}
			if env.Superpeers != 0 {
				opts = append(opts, WithSuperpeers(env.Superpeers))
			}
			opts = append(opts, env.Attach...)
			return NewPrefix(node, opts...)
		},
	})
}
