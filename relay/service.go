package relay

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"

	"github.com/superpeer-overlay/superpeer/superpeer"
)

// ErrConfig is wrapped by the error of Serve given an invalid option or
// argument.
var ErrConfig = errors.New("relay: invalid configuration")

// serviceConfig is what the ServiceOptions set.
type serviceConfig struct {
	resources    relayv2.Resources
	limitSet     bool
	limit        *relayv2.RelayLimit
	capacity     int
	capacitySet  bool
	tracers      []relayv2.MetricsTracer
	resourcesSet bool
}

// ServiceOption configures Serve.
type ServiceOption func(*serviceConfig)

// WithLimit sets the limits of each relayed connection (go-libp2p's
// default: 2 minutes and 128 KiB each way); nil relays without limits.
func WithLimit(limit *relayv2.RelayLimit) ServiceOption {
	return func(c *serviceConfig) { c.limit, c.limitSet = limit, true }
}

// WithCapacity sets the most reservations the relay holds at once, in
// place of the attach capacity (must be positive).
func WithCapacity(n int) ServiceOption {
	return func(c *serviceConfig) { c.capacity, c.capacitySet = n, true }
}

// WithResources sets the relay's other resources (reservation TTL, circuits
// per peer, buffer size; go-libp2p's DefaultResources unless set). Its
// MaxReservations is still the capacity, its per-IP and per-ASN bounds are
// raised to the capacity where lower, and WithLimit, where given,
// overrides its Limit.
func WithResources(rc relayv2.Resources) ServiceOption {
	return func(c *serviceConfig) { c.resources, c.resourcesSet = rc, true }
}

// WithMetricsTracer also feeds mt the relay's events (for instance
// go-libp2p's Prometheus tracer, relayv2.NewMetricsTracer), beside the
// service's own counters.
func WithMetricsTracer(mt relayv2.MetricsTracer) ServiceOption {
	return func(c *serviceConfig) {
		if mt != nil {
			c.tracers = append(c.tracers, mt)
		}
	}
}

// ServiceStats is what a Service has done, from the relay's own events.
type ServiceStats struct {
	Running bool `json:"running"`
	// Capacity is MaxReservations of the running service (0 when not
	// running).
	Capacity int `json:"capacity"`
	// Reservations are the reservations active now: those allowed, less
	// those the relay closed (expired, the client disconnected, the
	// service stopped).
	Reservations int `json:"reservations"`
	// ReservationsAllowed counts new reservations, not renewals.
	ReservationsAllowed uint64 `json:"reservations_allowed"`
	Renewals            uint64 `json:"renewals"`
	// ReservationsRefused counts reservation requests answered with a
	// status other than OK (full, too many from one IP, over a relayed
	// connection, the service closing, the answer not delivered).
	ReservationsRefused uint64 `json:"reservations_refused"`
	// RefusedOthers counts the peers other than this superpeer's clients
	// refused to keep room for its clients (among ReservationsRefused):
	// an attached client is always admitted, another peer only while the
	// other peers held and the clients leave a slot free.
	RefusedOthers uint64 `json:"refused_others"`
	// Circuits are the relayed connections open now (they outlive a stop:
	// go-libp2p's Close does not cut them).
	Circuits      int    `json:"circuits"`
	CircuitsTotal uint64 `json:"circuits_total"`
	// Starts counts how many times the service started (role changes).
	Starts uint64 `json:"starts"`
}

// Service runs a circuit-relay v2 service on a host while its selector
// says the peer is a superpeer.
type Service struct {
	h   host.Host
	sel superpeer.Selector
	cfg serviceConfig
	tr  *tracer

	mu       sync.Mutex
	relay    *relayv2.Relay // nil while not running
	capacity int            // MaxReservations of relay
	err      error          // the last start's failure
	closed   bool

	starts atomic.Uint64
	// refusedOthers counts the non-clients refused to keep room for the
	// superpeer's own clients (admission).
	refusedOthers atomic.Uint64
	cancel        func()
	done          chan struct{}
}

// defaultReservations is go-libp2p's MaxReservations, taken when the
// attach capacity is 0 (unbounded).
var defaultReservations = relayv2.DefaultResources().MaxReservations

// Serve runs a circuit-relay v2 service (go-libp2p's
// p2p/protocol/circuitv2/relay) on h while sel says this peer is a
// superpeer, and stops it when it stops being one: it reads sel.Role() at
// once and follows sel.Subscribe(). The relay holds at most the attach
// capacity of reservations (sel.Attach().Capacity(), read at each start;
// go-libp2p's 128 when the capacity is 0, unbounded; WithCapacity
// overrides it), and as many from one IP address or ASN, so that clients
// behind one NAT address are not refused below the capacity; its other
// resources are go-libp2p's defaults unless the options say otherwise.
//
// h must not run go-libp2p's own relay service as well (it runs only with
// libp2p.EnableRelayService(), off by default in go-libp2p v0.51): both
// would answer the hop protocol.
// The selector need not be started yet. Its Close sends no change, so the
// service runs on after it: Close the service with it.
func Serve(h host.Host, sel superpeer.Selector, opts ...ServiceOption) (*Service, error) {
	if h == nil || sel == nil {
		return nil, fmt.Errorf("%w: Serve needs a host and a selector", ErrConfig)
	}
	cfg := serviceConfig{resources: relayv2.DefaultResources()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.capacitySet && cfg.capacity < 1 {
		return nil, fmt.Errorf("%w: WithCapacity(%d): must be positive", ErrConfig, cfg.capacity)
	}
	if cfg.resourcesSet && (cfg.resources.ReservationTTL <= 0 || cfg.resources.MaxCircuits < 1 || cfg.resources.BufferSize < 1) {
		return nil, fmt.Errorf("%w: WithResources: the reservation TTL, circuits per peer and buffer size must be positive", ErrConfig)
	}
	if cfg.limitSet {
		cfg.resources.Limit = cfg.limit
	}
	s := &Service{h: h, sel: sel, cfg: cfg, tr: &tracer{also: cfg.tracers}, done: make(chan struct{})}
	changes, cancel := sel.Subscribe()
	stop := make(chan struct{})
	s.cancel = func() { cancel(); close(stop) }
	// Subscribed first, then the role read: a change in between comes
	// again on the channel.
	if err := s.follow(sel.Role()); err != nil {
		s.cancel()
		close(s.done)
		return nil, err
	}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-stop:
				return
			case c := <-changes:
				// A failed start is kept for Err and tried again at the
				// next change.
				_ = s.follow(c.Role)
			}
		}
	}()
	return s, nil
}

// follow starts the relay if role is Superpeer and it is not running, and
// stops it if role is anything else.
func (s *Service) follow(role superpeer.Role) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	switch {
	case role == superpeer.Superpeer && s.relay == nil:
		return s.startLocked()
	case role != superpeer.Superpeer && s.relay != nil:
		s.stopLocked()
	}
	return nil
}

// resources are the relay's resources for a capacity.
func (s *Service) resources(capacity int) relayv2.Resources {
	rc := s.cfg.resources
	rc.MaxReservations = capacity
	rc.MaxReservationsPerIP = max(rc.MaxReservationsPerIP, capacity)
	rc.MaxReservationsPerASN = max(rc.MaxReservationsPerASN, capacity)
	return rc
}

// capacityNow is the MaxReservations of a start now.
func (s *Service) capacityNow() int {
	if s.cfg.capacitySet {
		return s.cfg.capacity
	}
	if a := s.sel.Attach(); a != nil && a.Capacity() > 0 {
		return a.Capacity()
	}
	return defaultReservations
}

func (s *Service) startLocked() error {
	capacity := s.capacityNow()
	clients := func() []peer.ID {
		if a := s.sel.Attach(); a != nil {
			return a.Clients()
		}
		return nil
	}
	adm := newAdmission(s.h, clients, capacity, &s.refusedOthers)
	r, err := relayv2.New(s.h, relayv2.WithResources(s.resources(capacity)), relayv2.WithMetricsTracer(s.tr), relayv2.WithACL(adm))
	if err != nil {
		s.err = fmt.Errorf("relay: start: %w", err)
		return s.err
	}
	s.relay, s.capacity, s.err = r, capacity, nil
	s.starts.Add(1)
	return nil
}

func (s *Service) stopLocked() {
	// Close forgets every reservation (counted closed by the tracer) and
	// removes the hop handler; circuits already relayed run on to their
	// limits.
	_ = s.relay.Close()
	s.relay, s.capacity = nil, 0
}

// Running reports whether the relay service runs now.
func (s *Service) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relay != nil
}

// Err is the failure of the last start, nil if it succeeded (a failed
// start is tried again at the selector's next change).
func (s *Service) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats are the service's counters now.
func (s *Service) Stats() ServiceStats {
	s.mu.Lock()
	running, capacity := s.relay != nil, s.capacity
	s.mu.Unlock()
	return ServiceStats{
		Running:             running,
		Capacity:            capacity,
		Reservations:        int(max(0, s.tr.active.Load())),
		ReservationsAllowed: s.tr.allowed.Load(),
		Renewals:            s.tr.renewals.Load(),
		ReservationsRefused: s.tr.refused.Load(),
		RefusedOthers:       s.refusedOthers.Load(),
		Circuits:            int(max(0, s.tr.circuits.Load())),
		CircuitsTotal:       s.tr.circuitsTotal.Load(),
		Starts:              s.starts.Load(),
	}
}

// Close stops following the selector and the relay service.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.relay != nil {
		s.stopLocked()
	}
	s.mu.Unlock()
	s.cancel()
	<-s.done
	return nil
}

// tracer counts the relay's events for Stats (relayv2.MetricsTracer) and
// passes them on to the tracers of WithMetricsTracer. One serves every
// run of the service: a stop closes all reservations, so the active count
// comes back to zero between runs.
type tracer struct {
	also []relayv2.MetricsTracer

	active        atomic.Int64 // reservations allowed (new) less closed
	allowed       atomic.Uint64
	renewals      atomic.Uint64
	refused       atomic.Uint64
	circuits      atomic.Int64
	circuitsTotal atomic.Uint64
}

var _ relayv2.MetricsTracer = (*tracer)(nil)

func (t *tracer) RelayStatus(enabled bool) {
	for _, m := range t.also {
		m.RelayStatus(enabled)
	}
}

func (t *tracer) ConnectionOpened() {
	t.circuits.Add(1)
	t.circuitsTotal.Add(1)
	for _, m := range t.also {
		m.ConnectionOpened()
	}
}

func (t *tracer) ConnectionClosed(d time.Duration) {
	t.circuits.Add(-1)
	for _, m := range t.also {
		m.ConnectionClosed(d)
	}
}

func (t *tracer) ConnectionRequestHandled(status pbv2.Status) {
	for _, m := range t.also {
		m.ConnectionRequestHandled(status)
	}
}

// ReservationAllowed comes for every reservation the relay grants, a
// renewal when the peer already held one (the relay had not closed it).
func (t *tracer) ReservationAllowed(isRenewal bool) {
	if isRenewal {
		t.renewals.Add(1)
	} else {
		t.allowed.Add(1)
		t.active.Add(1)
	}
	for _, m := range t.also {
		m.ReservationAllowed(isRenewal)
	}
}

// ReservationClosed comes when reservations expire (the relay's minute
// sweep), their peer disconnects, or the relay closes (all of them).
func (t *tracer) ReservationClosed(cnt int) {
	t.active.Add(-int64(cnt))
	for _, m := range t.also {
		m.ReservationClosed(cnt)
	}
}

func (t *tracer) ReservationRequestHandled(status pbv2.Status) {
	if status != pbv2.Status_OK {
		t.refused.Add(1)
	}
	for _, m := range t.also {
		m.ReservationRequestHandled(status)
	}
}

func (t *tracer) BytesTransferred(cnt int) {
	for _, m := range t.also {
		m.BytesTransferred(cnt)
	}
}
