package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

// The live map's page: plain HTML, JavaScript and CSS, embedded, nothing
// fetched from elsewhere.
//
//go:embed web
var webAssets embed.FS

// webInterval is the shortest time between two snapshots of the live map;
// a snapshot that takes long stretches it (at most a fifth of the time
// goes to snapshots).
const webInterval = 500 * time.Millisecond

// frame is one message of the event stream: a snapshot and whether the
// map is paused.
type frame struct {
	swarm.Snapshot
	Paused bool `json:"paused"`
	// TookMs is how long the snapshot took to take.
	TookMs float64 `json:"took_ms"`
}

// mapServer serves the live map: the page, its event stream (GET
// /events, server-sent events, a frame every webInterval or so while at
// least one page listens, none while nobody does), one snapshot (GET
// /api/snapshot) and, for a swarm, kills and pause (POST /api/kill,
// /api/pause).
type mapServer struct {
	snapshot func() swarm.Snapshot
	view     *swarm.View // nil: one peer's view (peer run), no kills

	mu     sync.Mutex
	subs   map[chan []byte]struct{}
	paused bool
	last   *frame
	seq    int64
	rng    *rand.Rand
	wake   chan struct{}

	srv  *http.Server
	ln   net.Listener
	stop chan struct{}
	done chan struct{}
}

// startMap listens on addr and serves the map until Close.
func startMap(addr string, snapshot func() swarm.Snapshot, view *swarm.View) (*mapServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--web %s: %w", addr, err)
	}
	m := &mapServer{snapshot: snapshot, view: view, subs: map[chan []byte]struct{}{}, rng: rand.New(rand.NewSource(time.Now().UnixNano())),
		wake: make(chan struct{}, 1), ln: ln, stop: make(chan struct{}), done: make(chan struct{})}
	m.srv = &http.Server{Handler: m.handler(), ReadHeaderTimeout: 5 * time.Second}
	go m.srv.Serve(ln)
	go m.produce()
	return m, nil
}

// URL is where the page is.
func (m *mapServer) URL() string { return "http://" + m.ln.Addr().String() + "/" }

// Close stops the server and the snapshots.
func (m *mapServer) Close() {
	if m == nil {
		return
	}
	close(m.stop)
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
}

func (m *mapServer) handler() http.Handler {
	mux := http.NewServeMux()
	page, _ := fs.Sub(webAssets, "web")
	mux.Handle("/", http.FileServer(http.FS(page)))
	mux.HandleFunc("GET /events", m.events)
	mux.HandleFunc("GET /api/snapshot", func(w http.ResponseWriter, r *http.Request) {
		f := m.take()
		writeJSONResponse(w, http.StatusOK, f)
	})
	mux.HandleFunc("/api/kill", m.kill)
	mux.HandleFunc("/api/pause", m.pause)
	return mux
}

// take makes a frame of the current state.
func (m *mapServer) take() *frame {
	start := time.Now()
	s := m.snapshot()
	took := time.Since(start)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	s.Seq = m.seq
	return &frame{Snapshot: s, Paused: m.paused, TookMs: float64(took.Microseconds()) / 1000}
}

// produce takes snapshots while somebody listens and is not paused, and
// sends each to every listener (a slow one gets only the latest).
func (m *mapServer) produce() {
	defer close(m.done)
	wait := webInterval
	for {
		m.mu.Lock()
		listening, paused := len(m.subs) > 0, m.paused
		m.mu.Unlock()
		if listening && !paused {
			start := time.Now()
			f := m.take()
			b, err := json.Marshal(f)
			if err == nil {
				m.mu.Lock()
				m.last = f
				m.broadcast(b)
				m.mu.Unlock()
			}
			wait = max(webInterval, 4*time.Since(start))
		}
		var tick <-chan time.Time
		if listening && !paused {
			tick = time.After(wait)
		}
		select {
		case <-m.stop:
			return
		case <-m.wake:
		case <-tick:
		}
	}
}

// broadcast sends b to every listener, replacing what a slow one has not
// read yet (m.mu held).
func (m *mapServer) broadcast(b []byte) {
	for ch := range m.subs {
		select {
		case <-ch:
		default:
		}
		ch <- b
	}
}

// poke makes the producer take a snapshot now.
func (m *mapServer) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mapServer) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	ch := make(chan []byte, 1)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	if m.last != nil && m.paused {
		if b, err := json.Marshal(m.last); err == nil {
			ch <- b
		}
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}()
	m.poke()
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-m.stop:
			return
		case b := <-ch:
			if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
				return
			}
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
		}
		fl.Flush()
	}
}

// killResult is the answer to a kill.
type killResult struct {
	Killed     []int  `json:"killed"`
	Superpeers int    `json:"superpeers"`
	Why        string `json:"why"`
}

// kill serves POST /api/kill with one of peer=I (that live peer),
// superpeer=any (a live superpeer at random) or fraction=F (that fraction
// of the live peers, 0 < F < 1).
func (m *mapServer) kill(w http.ResponseWriter, r *http.Request) {
	if !m.post(w, r) {
		return
	}
	if m.view == nil {
		httpError(w, http.StatusNotFound, "kills are for peer swarm --web")
		return
	}
	q := r.Form
	given := 0
	for _, k := range []string{"peer", "superpeer", "fraction"} {
		if q.Has(k) {
			given++
		}
	}
	if given != 1 {
		httpError(w, http.StatusBadRequest, "want exactly one of peer=INDEX, superpeer=any or fraction=F (0 < F < 1)")
		return
	}
	var victims []int
	var why string
	switch {
	case q.Has("peer"):
		i, err := strconv.Atoi(q.Get("peer"))
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("peer %q: want a peer's index", q.Get("peer")))
			return
		}
		victims, why = []int{i}, fmt.Sprintf("peer %d", i)
	case q.Has("superpeer"):
		if v := q.Get("superpeer"); v != "any" {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("superpeer %q: want any (peer=INDEX names one)", v))
			return
		}
		m.mu.Lock()
		i := m.view.PickSuperpeer(m.rng)
		m.mu.Unlock()
		if i < 0 {
			httpError(w, http.StatusConflict, "no live superpeer to kill")
			return
		}
		victims, why = []int{i}, "a superpeer"
	default:
		f, err := strconv.ParseFloat(q.Get("fraction"), 64)
		if err != nil || !(f > 0 && f < 1) {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("fraction %q: want a number between 0 and 1 (exclusive)", q.Get("fraction")))
			return
		}
		m.mu.Lock()
		victims = m.view.PickFraction(f, m.rng)
		m.mu.Unlock()
		why = fmt.Sprintf("%g of the peers", f)
		if len(victims) == 0 {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("fraction %g of the live peers is nobody", f))
			return
		}
	}
	sps, err := m.view.Kill(victims, why)
	switch {
	case errors.Is(err, swarm.ErrNotReady):
		httpError(w, http.StatusConflict, "the swarm is still converging: kills are taken once it has reported")
		return
	case err != nil:
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	m.poke()
	writeJSONResponse(w, http.StatusOK, killResult{Killed: victims, Superpeers: sps, Why: why})
}

// pause serves POST /api/pause: paused=true or false (absent: toggle).
// A paused map keeps its last picture and takes no snapshots.
func (m *mapServer) pause(w http.ResponseWriter, r *http.Request) {
	if !m.post(w, r) {
		return
	}
	m.mu.Lock()
	want := !m.paused
	m.mu.Unlock()
	if v := r.Form.Get("paused"); r.Form.Has("paused") {
		b, err := strconv.ParseBool(v)
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("paused %q: want true or false", v))
			return
		}
		want = b
	}
	m.mu.Lock()
	m.paused = want
	if m.last != nil {
		f := *m.last
		f.Paused = want
		m.last = &f
		if b, err := json.Marshal(&f); err == nil {
			m.broadcast(b)
		}
	}
	m.mu.Unlock()
	m.poke()
	writeJSONResponse(w, http.StatusOK, map[string]bool{"paused": want})
}

// post checks the method and parses a small form; false if it answered.
func (m *mapServer) post(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": want POST")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		httpError(w, http.StatusBadRequest, "bad form: "+err.Error())
		return false
	}
	return true
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSONResponse(w, code, map[string]string{"error": msg})
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// swarmWeb is `peer swarm --web`: the swarm's view, its map server and the
// methods' selectors kept running after the report. Its methods are
// nil-safe, so that runSwarm calls them whether or not --web is set.
type swarmWeb struct {
	view *swarm.View
	srv  *mapServer
	stop chan struct{}
	keep []func()
	once sync.Once
}

// webRunContext is the run's context: --timeout bounds it, except that with
// --web the timeout ends once the report is out (release), so that the
// swarm runs on until interrupted.
func webRunContext(timeout time.Duration, web bool) (ctx context.Context, cancel func(), release func()) {
	if !web {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		return ctx, cancel, func() {}
	}
	ctx, cancelCause := context.WithCancelCause(context.Background())
	timer := time.AfterFunc(timeout, func() { cancelCause(fmt.Errorf("--timeout %v: %w", timeout, context.DeadlineExceeded)) })
	return ctx, func() { timer.Stop(); cancelCause(nil) }, func() { timer.Stop() }
}

// startSwarmWeb starts the map of s on addr.
func startSwarmWeb(addr string, s *swarm.Swarm, stderr io.Writer) (*swarmWeb, error) {
	w := &swarmWeb{view: swarm.NewView(s), stop: make(chan struct{})}
	srv, err := startMap(addr, w.view.Snapshot, w.view)
	if err != nil {
		return nil, err
	}
	w.srv = srv
	go w.view.Track(w.stop)
	fmt.Fprintf(stderr, "web map on %s\n", srv.URL())
	return w, nil
}

// View is the swarm's view (nil without --web).
func (w *swarmWeb) View() *swarm.View {
	if w == nil {
		return nil
	}
	return w.view
}

// keeper is what runMethod calls to keep the last method's selectors
// running past the report (nil: stop them as the method ends).
func (w *swarmWeb) keeper(last bool) func(stop func()) {
	if w == nil || !last {
		return nil
	}
	return func(stop func()) { w.keep = append(w.keep, stop) }
}

// serve marks the swarm ready to be driven and blocks until interrupted.
func (w *swarmWeb) serve(stderr io.Writer) {
	if w == nil {
		return
	}
	w.view.SetReady()
	w.srv.poke()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "the swarm runs on for the map at %s until interrupted\n", w.srv.URL())
	<-ctx.Done()
}

// Close stops the map and the kept selectors.
func (w *swarmWeb) Close() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.stop)
		w.srv.Close()
		for _, stop := range w.keep {
			stop()
		}
	})
}

// release stops a method's selectors as runMethod returns, or with keep
// (the last method under --web) leaves them running for the map.
func (f methodFlags) release(stop func()) {
	if f.keep != nil {
		f.keep(stop)
		return
	}
	stop()
}

// peerMap is `peer run --web`: one peer's own view — its neighbours, the
// tokens it knows, its superpeer or its clients — drawn as the swarm's map
// is (Mode "peer", the peer itself Self = 0).
type peerMap struct {
	node *dht.Node
	sel  superpeer.Selector
	rsel *repel.Selector
	viv  *vivaldi.Service

	mu     sync.Mutex
	start  time.Time
	axes   [2][]float64
	trails map[uint32][]peer.ID
	rateAt time.Time
	rateN  uint64
}

// startPeerWeb serves the map of one peer on addr; sel is nil without a
// method.
func startPeerWeb(addr string, node *dht.Node, sel superpeer.Selector) (*mapServer, error) {
	pm := &peerMap{node: node, sel: sel, start: time.Now(), trails: map[uint32][]peer.ID{}}
	if rsel, ok := sel.(*repel.Selector); ok {
		pm.rsel, pm.viv = rsel, rsel.Vivaldi()
	}
	return startMap(addr, pm.snapshot, nil)
}

func (pm *peerMap) snapshot() swarm.Snapshot {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	snap := swarm.Snapshot{Mode: "peer", Self: 0, T: time.Since(pm.start).Seconds(), Stage: swarm.Stage{Name: "live"}, Method: "none"}
	index := map[peer.ID]int{}
	var ids []peer.ID
	add := func(p peer.ID) int {
		if i, ok := index[p]; ok {
			return i
		}
		index[p] = len(ids)
		ids = append(ids, p)
		return index[p]
	}
	self := pm.node.ID()
	add(self)
	for _, p := range pm.node.RoutingTable().ListPeers() {
		add(p)
	}
	coords := map[peer.ID]vivaldi.Coord{}
	if pm.viv != nil {
		for p, c := range pm.viv.PeerCoordinates() {
			coords[p] = c
		}
		coords[self] = pm.viv.Coordinate()
	}
	roles := map[peer.ID]string{}
	sp := map[peer.ID]peer.ID{}
	var loads []swarm.LoadView
	var tokens []repel.Token
	if pm.sel != nil {
		snap.Method = methodName(pm.sel)
		snap.Capacity = pm.sel.Attach().Capacity()
		role, mine := pm.sel.Role(), pm.sel.Superpeer()
		switch {
		case role == superpeer.Superpeer:
			roles[self], sp[self] = "superpeer", self
			for _, c := range pm.sel.Attach().Clients() {
				add(c)
				roles[c], sp[c] = "client", self
			}
			loads = append(loads, swarm.LoadView{SP: 0, Load: pm.sel.Attach().Load(), Capacity: snap.Capacity})
		case mine != "":
			add(mine)
			roles[self], sp[self] = "client", mine
			roles[mine], sp[mine] = "superpeer", mine
		case role != superpeer.Unknown:
			roles[self] = "unserved"
		}
	}
	if pm.rsel != nil {
		tokens = pm.rsel.LiveTokens()
		if t, ok := pm.rsel.Held(); ok && pm.sel.Role() != superpeer.Superpeer {
			roles[self] = "holder"
			tokens = append(tokens, t)
		}
		for _, t := range tokens {
			h := peer.ID(t.Holder)
			add(h)
			if len(t.Coord.Vec) > 0 && h != self {
				coords[h] = t.Coord
			}
			if roles[h] == "" || roles[h] == "neighbour" {
				roles[h] = "holder"
			}
			tr := pm.trails[t.ID]
			if len(tr) == 0 || tr[len(tr)-1] != h {
				tr = append(tr, h)
			}
			pm.trails[t.ID] = tr[max(0, len(tr)-32):]
		}
	}
	// The projection of every coordinate the peer knows.
	var vecIdx []int
	var vecs [][]float64
	for i, p := range ids {
		if c, ok := coords[p]; ok && len(c.Vec) > 0 {
			vecIdx = append(vecIdx, i)
			vecs = append(vecs, c.Vec)
		}
	}
	pts, axes, kept := swarm.Project(vecs, pm.axes)
	pm.axes, snap.Spread = axes, kept
	pos := map[int][2]float64{}
	for k, i := range vecIdx {
		pos[i] = pts[k]
	}
	var scheme superpeer.Prefix
	ps, isPrefix := pm.sel.(*superpeer.PrefixSelector)
	if isPrefix {
		scheme = ps.Scheme()
		snap.Target = scheme.Groups()
	}
	for i, p := range ids {
		pv := swarm.PeerView{I: i, ID: shortID(p), K: swarm.KeyFraction(dht.KeyOf(p)), Role: roles[p], SP: -1, G: -1}
		if pv.Role == "" {
			pv.Role = "neighbour"
		}
		if s, ok := sp[p]; ok {
			pv.SP = index[s]
		}
		if xy, ok := pos[i]; ok {
			pv.Pos, pv.X, pv.Y, pv.H = true, xy[0], xy[1], coords[p].Height*1000
		}
		if isPrefix {
			pv.G = scheme.Group(dht.KeyOf(p))
		}
		snap.Peers = append(snap.Peers, pv)
		if pv.Role == "superpeer" {
			snap.Superpeers++
		}
	}
	if isPrefix {
		g := scheme.Group(pm.node.Key())
		for k := 0; k < scheme.Groups(); k++ {
			gv := swarm.GroupView{G: k, Start: swarm.KeyFraction(scheme.GroupKey(k)), Share: scheme.Share(k), SP: -1, Expected: -1}
			if k == g {
				if s, ok := sp[self]; ok {
					gv.SP = index[s]
				}
			}
			snap.Groups = append(snap.Groups, gv)
		}
	}
	if pm.rsel != nil {
		snap.Target = len(tokens)
		for _, t := range tokens {
			tv := swarm.TokenView{ID: t.ID, Holder: index[peer.ID(t.Holder)], Epoch: t.Epoch}
			for _, h := range pm.trails[t.ID] {
				if i, ok := index[h]; ok {
					tv.Trail = append(tv.Trail, i)
				}
			}
			snap.Tokens = append(snap.Tokens, tv)
		}
	}
	snap.Loads = loads
	snap.N, snap.Live = pm.node.NetworkSize(), len(ids)
	// This peer's figures: its own error estimate, the predicted RTT to its
	// superpeer (or mean to its clients), the messages it sends.
	if c, ok := coords[self]; ok {
		snap.Figures.VivaldiMedian = c.Error
		var sum float64
		var n int
		for p, s := range sp {
			if p == s {
				continue
			}
			a, b := coords[p], coords[s]
			if len(a.Vec) > 0 && len(b.Vec) > 0 && (p == self || s == self) {
				sum += a.DistanceTo(b) * 1000
				n++
			}
		}
		if n > 0 {
			snap.Figures.ClientRTT = sum / float64(n)
			snap.Figures.Served = n
		}
	}
	st := pm.node.Stats()
	total := st.KadSent.Load() + st.ClosestSent.Load()
	if pm.sel != nil {
		total += pm.sel.Attach().Stats.Sent.Load()
	}
	if pm.viv != nil {
		total += pm.viv.Stats().Samples
	}
	if pm.rsel != nil {
		rs := pm.rsel.Stats()
		total += rs["announce_sent"] + rs["move_frames_sent"] + rs["survey_frames_sent"]
		snap.Figures.Fenced, snap.Figures.Minted, snap.Figures.Moves = rs[repel.EventFenced.String()], rs[repel.EventMinted.String()], rs[repel.EventAccepted.String()]
	}
	now := time.Now()
	if !pm.rateAt.IsZero() && total >= pm.rateN {
		snap.Figures.MsgsPerPeerSec = float64(total-pm.rateN) / now.Sub(pm.rateAt).Seconds()
	}
	pm.rateAt, pm.rateN = now, total
	return snap
}

// methodName names a selector's method.
func methodName(sel superpeer.Selector) string {
	switch sel.(type) {
	case *superpeer.PrefixSelector:
		return "prefix"
	case *repel.Selector:
		return "repel"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", sel), "*")
}

func shortID(p peer.ID) string {
	s := p.String()
	return s[max(0, len(s)-6):]
}
