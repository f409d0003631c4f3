package counters

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a family's metric type and how the values of several sources
// (peers registered on one Registerer) combine.
type Kind uint8

const (
	// Counter is a counter; the sources' values add up.
	Counter Kind = iota
	// Gauge is a gauge; the sources' values add up.
	Gauge
	// MeanGauge is a gauge; its value is the mean over the sources that
	// report it.
	MeanGauge
)

// Family is one metric family of a component: its full name
// (superpeer_<subsystem>_<name>_<unit>, _total on counters), its help, its
// kind and at most one variable label ("" for none).
type Family struct {
	Name, Help string
	Kind       Kind
	Label      string
}

// Emit reports a value of family i (an index into the families given to
// Register) for the label value label ("" for a family without a label).
// A source emits each (family, label) at most once per scrape.
type Emit func(i int, label string, v float64)

// EmitAll emits every counter of m under family i, labelled by its name,
// and a zero for each of known that m lacks, so that the series of the
// known reasons exist before the first one counts.
func EmitAll(emit Emit, i int, m map[string]uint64, known ...string) {
	for _, k := range known {
		if _, ok := m[k]; !ok {
			emit(i, k, 0)
		}
	}
	for k, v := range m {
		emit(i, k, float64(v))
	}
}

// Register exports fams on reg, read at every scrape by calling report;
// the returned function stops (call it when the component closes). A nil
// reg (or a nil pointer in it) registers nothing.
//
// Registration is idempotent per Registerer: the first source of fams on
// reg registers one collector, later ones (the components of other peers
// in the process) join it, and a scrape reports the sum of their values
// (the mean for a MeanGauge), as go-libp2p's metrics add up over the hosts
// of a process. When the last source stops the collector is unregistered.
// A source that stops takes its counts with it: the sums fall, which
// Prometheus reads as a counter reset.
//
// report must not block for long, and must not register or unregister.
func Register(reg prometheus.Registerer, fams []Family, report func(Emit)) (stop func(), err error) {
	if reg == nil {
		return func() {}, nil
	}
	if v := reflect.ValueOf(reg); v.Kind() == reflect.Pointer && v.IsNil() {
		return func() {}, nil // a nil *prometheus.Registry in the interface
	}
	if len(fams) == 0 || report == nil {
		return nil, errors.New("counters: Register needs families and a report function")
	}
	if t := reflect.TypeOf(reg); !t.Comparable() {
		return nil, fmt.Errorf("counters: a Registerer of type %v cannot be told apart from another (not comparable)", t)
	}
	key := groupKey{reg, fams[0].Name}
	src := &source{report}
	groups.mu.Lock()
	defer groups.mu.Unlock()
	g := groups.m[key]
	if g == nil {
		g = newGroup(fams)
		if err := reg.Register(g); err != nil {
			var are prometheus.AlreadyRegisteredError
			ex, ok := (*group)(nil), false
			if errors.As(err, &are) {
				ex, ok = are.ExistingCollector.(*group)
			}
			if !ok {
				return nil, fmt.Errorf("counters: register %s: %w", fams[0].Name, err)
			}
			g = ex
		}
		if groups.m == nil {
			groups.m = map[groupKey]*group{}
		}
		groups.m[key] = g
	}
	g.mu.Lock()
	g.sources[src] = struct{}{}
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			groups.mu.Lock()
			defer groups.mu.Unlock()
			g.mu.Lock()
			delete(g.sources, src)
			empty := len(g.sources) == 0
			g.mu.Unlock()
			if empty && groups.m[key] == g {
				delete(groups.m, key)
				reg.Unregister(g)
			}
		})
	}, nil
}

// groups are the collectors registered, by Registerer and the name of
// their first family.
var groups struct {
	mu sync.Mutex
	m  map[groupKey]*group
}

type groupKey struct {
	reg  prometheus.Registerer
	name string
}

// source is one component's report function (a pointer, to be a map key).
type source struct{ report func(Emit) }

// group is the collector of one component's families on one Registerer,
// over the sources registered there.
type group struct {
	fams  []Family
	descs []*prometheus.Desc

	mu      sync.Mutex
	sources map[*source]struct{}
}

func newGroup(fams []Family) *group {
	g := &group{fams: fams, sources: map[*source]struct{}{}}
	for _, f := range fams {
		var labels []string
		if f.Label != "" {
			labels = []string{f.Label}
		}
		g.descs = append(g.descs, prometheus.NewDesc(f.Name, f.Help, labels, nil))
	}
	return g
}

// Describe implements prometheus.Collector.
func (g *group) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range g.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: every source reports, and the
// values of each (family, label) combine by the family's kind.
func (g *group) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	srcs := make([]*source, 0, len(g.sources))
	for s := range g.sources {
		srcs = append(srcs, s)
	}
	g.mu.Unlock()
	type acc struct {
		sum float64
		n   int
	}
	vals := make([]map[string]*acc, len(g.fams))
	emit := func(i int, label string, v float64) {
		if i < 0 || i >= len(vals) {
			return
		}
		if vals[i] == nil {
			vals[i] = map[string]*acc{}
		}
		a := vals[i][label]
		if a == nil {
			a = &acc{}
			vals[i][label] = a
		}
		a.sum += v
		a.n++
	}
	for _, s := range srcs {
		s.report(emit)
	}
	for i, f := range g.fams {
		typ := prometheus.GaugeValue
		if f.Kind == Counter {
			typ = prometheus.CounterValue
		}
		for label, a := range vals[i] {
			v := a.sum
			if f.Kind == MeanGauge {
				v /= float64(a.n)
			}
			var lv []string
			if f.Label != "" {
				lv = []string{label}
			}
			ch <- prometheus.MustNewConstMetric(g.descs[i], typ, v, lv...)
		}
	}
}

// Values gathers g into metric name → label value → value, for checks:
// the label value is that of the metric's first label ("" for none), the
// value a counter's, gauge's or untyped metric's.
func Values(g prometheus.Gatherer) (map[string]map[string]float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		m := map[string]float64{}
		for _, x := range mf.GetMetric() {
			var label string
			if ls := x.GetLabel(); len(ls) > 0 {
				label = ls[0].GetValue()
			}
			switch {
			case x.Counter != nil:
				m[label] = x.GetCounter().GetValue()
			case x.Gauge != nil:
				m[label] = x.GetGauge().GetValue()
			case x.Untyped != nil:
				m[label] = x.GetUntyped().GetValue()
			}
		}
		out[mf.GetName()] = m
	}
	return out, nil
}

// Mismatches compares what g exports with want (metric name → value of its
// first label, "" when unlabelled → value) and describes each series that
// is missing or differs, in the order of the names and labels; none is
// nil. Tests of the components' metrics share it.
func Mismatches(g prometheus.Gatherer, want map[string]map[string]float64) ([]string, error) {
	got, err := Values(g)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		for _, label := range slices.Sorted(maps.Keys(want[name])) {
			if v, ok := got[name][label]; !ok || v != want[name][label] {
				out = append(out, fmt.Sprintf("%s{%q} = %v (present %v), want %v", name, label, v, ok, want[name][label]))
			}
		}
	}
	return out, nil
}

// Named lists the metric families g exports whose names start with prefix.
func Named(g prometheus.Gatherer, prefix string) ([]string, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			out = append(out, mf.GetName())
		}
	}
	return out, nil
}
