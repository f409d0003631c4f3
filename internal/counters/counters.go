// Package counters holds the library's named counters and turns them, and
// whatever else a component reports, into Prometheus metrics.
//
// A Set is what every protocol counts its refused frames with (by reason:
// dht, vivaldi, the attach protocol, repel) and repel its traffic and
// events. Register exports a component's metrics on a Registerer: it reads
// the component at scrape time, and the components of several peers that
// register on one Registerer share one collector whose values add up.
//
// The package imports nothing of the module, so that every library package
// may import it.
package counters

import "sync"

// Set is a set of named counters, safe for concurrent use. The zero value
// is an empty set ready to count; a Set must not be copied once used.
type Set struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Add adds n to the counter name (made at zero if new).
func (s *Set) Add(name string, n uint64) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]uint64{}
	}
	s.m[name] += n
	s.mu.Unlock()
}

// Get is the counter name (0 if it never counted).
func (s *Set) Get(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[name]
}

// Snapshot is a copy of every counter, the caller's to keep (never nil).
func (s *Set) Snapshot() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}
