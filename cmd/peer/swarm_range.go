package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

// One overlay across several `peer swarm` processes: each runs a range of
// the n peers (--peers FROM:TO) on real sockets, the later ones joining
// through a peer of an earlier one (--join), and `peer merge` joins their
// reports into the overlay's.

func init() {
	commands["merge"] = command{
		summary: "join the reports of the `peer swarm --peers` processes of one overlay into its report",
		run:     runMerge,
	}
}

// where is what --transport, --listen, --peers and --join ask for.
type where struct {
	transport swarm.Transport
	ip        string
	from, to  int
	join      []peer.AddrInfo
	n         int
}

// ranged reports whether this process runs part of an overlay.
func (w where) ranged() bool { return w.from > 0 || w.to < w.n || len(w.join) > 0 }

func parseWhere(transport, ip, peers, join string, n int) (where, error) {
	w := where{ip: ip, to: n, n: n}
	t, err := swarm.ParseTransport(transport)
	if err != nil {
		return w, fmt.Errorf("%w: --transport: %v", errUsage, err)
	}
	w.transport = t
	if peers != "" {
		a, b, ok := strings.Cut(peers, ":")
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || from < 0 || to > n || from >= to {
			return w, fmt.Errorf("%w: --peers %q: want FROM:TO with 0 <= FROM < TO <= n (%d)", errUsage, peers, n)
		}
		w.from, w.to = from, to
	}
	if join != "" {
		for _, s := range strings.Split(join, ",") {
			addr, err := ma.NewMultiaddr(strings.TrimSpace(s))
			if err != nil {
				return w, fmt.Errorf("%w: --join %q: %v", errUsage, s, err)
			}
			info, err := peer.AddrInfoFromP2pAddr(addr)
			if err != nil {
				return w, fmt.Errorf("%w: --join %q: %v (want /ip4/…/tcp/…/p2p/ID)", errUsage, s, err)
			}
			w.join = append(w.join, *info)
		}
	}
	if w.ranged() && !t.Real() {
		return w, fmt.Errorf("%w: --peers and --join need --transport tcp or quic (mocknet is one process)", errUsage)
	}
	return w, nil
}

// rangeReport is what a process running a range of the overlay adds to its
// report: which peers, how to join them, and its peers' selection as far
// as it can check it (every peer's role and superpeer against what all
// keys call for; whether a remote superpeer lists a client is the other
// process's to check).
type rangeReport struct {
	From int `json:"from"`
	To   int `json:"to"`
	// Join is the first peer's multiaddrs: another process's --join.
	Join []string `json:"join"`
	// Joined is what this process joined through (--join).
	Joined []string `json:"joined,omitempty"`
	// LatencySpec is --latency as given, for `peer merge` to place the
	// peers again.
	LatencySpec string `json:"latency_spec"`
	// Prefix: the S asked for, the code and the capacity, for `peer merge`.
	Superpeers int  `json:"superpeers_wanted,omitempty"`
	Pow2       bool `json:"pow2,omitempty"`
	Capacity   int  `json:"capacity,omitempty"`
	// SelectSeconds is how long until this range's peers had converged.
	SelectSeconds float64 `json:"select_seconds,omitempty"`
	Wrong         int     `json:"wrong"`
	Unserved      int     `json:"unserved"`
	// Clients lists the clients of each superpeer this process runs (by
	// peer ID), for `peer merge` to check that a client's superpeer in
	// another process lists it.
	Clients map[string][]string `json:"clients,omitempty"`
}

// announceRange prints (and with file writes) how to join this process's
// peers; nil on mocknet.
func announceRange(s *swarm.Swarm, w where, spec, file string, stderr io.Writer) (*rangeReport, error) {
	if !w.transport.Real() {
		return nil, nil
	}
	r := &rangeReport{From: w.from, To: w.to, LatencySpec: spec}
	for _, a := range s.Addrs(w.from) {
		r.Join = append(r.Join, a.String())
	}
	for _, j := range w.join {
		addrs, _ := peer.AddrInfoToP2pAddrs(&j)
		for _, a := range addrs {
			r.Joined = append(r.Joined, a.String())
		}
	}
	fmt.Fprintf(stderr, "peers %d–%d joined; another process joins them with --join %s\n", w.from, w.to-1, strings.Join(r.Join, ","))
	if file != "" {
		if err := os.WriteFile(file, []byte(strings.Join(r.Join, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// runRangeMethod runs the prefix method on this process's peers until they
// have converged as far as this process can tell, and reports their
// superpeers; the overlay's figures are `peer merge`'s.
func runRangeMethod(r *rangeReport) func(context.Context, *swarm.Swarm, *swarm.VivaldiRun, *swarm.GossipCounter, superpeer.Method, methodFlags) (*methodReport, error) {
	return func(ctx context.Context, s *swarm.Swarm, vr *swarm.VivaldiRun, g *swarm.GossipCounter, m superpeer.Method, f methodFlags) (*methodReport, error) {
		p := f.params()
		if err := s.StartPrefix(ctx, p.PrefixOptions()...); err != nil {
			return nil, err
		}
		// The selectors stay up past the report, while other processes
		// converge through them; runSwarm stops them after --linger.
		took, err := s.WaitPrefix(ctx, s.SelectionStart())
		if err != nil {
			s.StopMethod()
			return nil, err
		}
		r.Superpeers, r.Pow2, r.Capacity = p.Superpeers, p.Pow2, s.Selector(s.Live()[0]).Attach().Capacity()
		r.SelectSeconds = took.Seconds()
		mr := &methodReport{Method: m.Name, RSSBytes: swarm.RSS(), Goroutines: swarm.Goroutines()}
		rangeSnapshot(s, r, mr)
		return mr, nil
	}
}

// rangeSnapshot reads this range's selection now: every peer's superpeer,
// what this process finds wrong, and its superpeers' clients.
func rangeSnapshot(s *swarm.Swarm, r *rangeReport, mr *methodReport) {
	st := s.PrefixState()
	r.Wrong, r.Unserved = st.Wrong, st.Unserved
	mr.SuperpeerOf = make([]int, len(st.Assignment))
	for i, j := range st.Assignment {
		mr.SuperpeerOf[i] = max(j, -1)
	}
	r.Clients = map[string][]string{}
	for _, i := range st.Superpeers {
		var cs []string
		for _, c := range s.Selector(i).Attach().Clients() {
			cs = append(cs, c.String())
		}
		slices.Sort(cs)
		r.Clients[s.Peers[i].ID.String()] = cs
	}
}

// mergedReport is the overlay's report from its processes' (`peer merge`).
type mergedReport struct {
	N         int    `json:"n"`
	Seed      int64  `json:"seed"`
	Latency   string `json:"latency"`
	Transport string `json:"transport"`
	// Parts are the processes' reports, in the order of their ranges.
	Parts []mergedPart `json:"parts"`
	// Expected is the superpeers all keys call for; Exact says the peers'
	// superpeers are those.
	Expected []int `json:"expected"`
	Exact    bool  `json:"exact"`
	// ListedNot counts clients whose superpeer's report does not list them
	// (reports of different moments, or a stale attachment); they count
	// as wrong.
	ListedNot  int                     `json:"listed_not"`
	Superpeers *swarm.SelectionSummary `json:"superpeers"`
	Peers      []peerReport            `json:"peers"`
}

type mergedPart struct {
	File            string  `json:"file"`
	From            int     `json:"from"`
	To              int     `json:"to"`
	BuildSeconds    float64 `json:"build_seconds"`
	ConvergeSeconds float64 `json:"converge_seconds"`
	SelectSeconds   float64 `json:"select_seconds"`
	RSSPerPeer      float64 `json:"rss_bytes_per_peer"`
	GoroutinesPer   float64 `json:"goroutines_per_peer"`
	ConnsMean       float64 `json:"connections_mean"`
	Wrong           int     `json:"wrong"`
	Unserved        int     `json:"unserved"`
}

var errMerge = errors.New("merge")

func runMerge(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("merge", stderr)
	jsonOut := fs.String("json", "", "write the overlay's report to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() < 1 {
		return fmt.Errorf("%w: peer merge [--json FILE] REPORT.json…", errUsage)
	}
	var parts []swarmReport
	for _, name := range fs.Args() {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var r swarmReport
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%w: %s: %v", errMerge, name, err)
		}
		if r.Range == nil {
			return fmt.Errorf("%w: %s is not a report of `peer swarm --transport tcp|quic` (no range)", errMerge, name)
		}
		parts = append(parts, r)
	}
	m, err := merge(parts, fs.Args())
	if err != nil {
		return err
	}
	sum := m.Superpeers
	fmt.Fprintf(stdout, "overlay          %d peers over %s, %d processes on %s sockets\n", m.N, m.Latency, len(m.Parts), m.Transport)
	for _, p := range m.Parts {
		fmt.Fprintf(stdout, "  %-14s peers %d–%d: join %.1f s, converge %.1f s, select %.1f s; %.2f MiB and %.1f goroutines a peer; %d wrong, %d unserved\n",
			p.File, p.From, p.To-1, p.BuildSeconds, p.ConvergeSeconds, p.SelectSeconds, p.RSSPerPeer/(1<<20), p.GoroutinesPer, p.Wrong, p.Unserved)
	}
	fmt.Fprintf(stdout, "superpeers       %d (all keys call for %d: exact %v), capacity %d, clients per superpeer max %d mean %.1f\n",
		sum.Count, len(m.Expected), m.Exact, sum.Capacity, sum.ClientsPerSuperpeer.Max, sum.ClientsPerSuperpeer.Mean)
	fmt.Fprintf(stdout, "client RTT       mean %.1f ms, p50 %.1f, p90 %.1f (matrix); random %.1f, k-median %.1f; %d unserved, %d wrong (%d attached to a superpeer whose report does not list them)\n",
		sum.ClientRTT.Mean, sum.ClientRTT.P50, sum.ClientRTT.P90, sum.RandomClientRTT.Mean, sum.KMedianClientRTT.Mean, sum.Unserved, sum.Wrong, m.ListedNot)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report           %s\n", *jsonOut)
	}
	if !m.Exact || sum.Unserved > 0 || sum.Wrong > 0 {
		return fmt.Errorf("%w: the overlay's selection is not the one all keys call for, or a client is unserved or wrong", errMerge)
	}
	return nil
}

// merge checks that the parts are ranges of one overlay that together
// cover it, and scores its selection over the matrix.
func merge(parts []swarmReport, files []string) (*mergedReport, error) {
	order := make([]int, len(parts))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return parts[a].Range.From - parts[b].Range.From })
	first := parts[order[0]]
	m := &mergedReport{N: first.N, Seed: first.Seed, Latency: first.Latency, Transport: first.Transport}
	next := 0
	for _, k := range order {
		r := parts[k]
		switch {
		case r.N != m.N || r.Seed != m.Seed || r.Latency != m.Latency || r.Range.LatencySpec != first.Range.LatencySpec:
			return nil, fmt.Errorf("%w: %s is of another overlay (n %d, seed %d, %s; not %d, %d, %s)", errMerge, files[k], r.N, r.Seed, r.Latency, m.N, m.Seed, m.Latency)
		case r.Range.From != next:
			return nil, fmt.Errorf("%w: %s runs peers %d–%d, but the next peer is %d (ranges overlap or miss peers)", errMerge, files[k], r.Range.From, r.Range.To-1, next)
		case r.Method != "prefix" || r.Range.Superpeers != first.Range.Superpeers || r.Range.Pow2 != first.Range.Pow2:
			return nil, fmt.Errorf("%w: %s ran --method %s with S %d, not prefix with S %d like the others", errMerge, files[k], r.Method, r.Range.Superpeers, first.Range.Superpeers)
		}
		next = r.Range.To
		ran := float64(r.Range.To - r.Range.From)
		m.Parts = append(m.Parts, mergedPart{File: files[k], From: r.Range.From, To: r.Range.To, BuildSeconds: r.BuildSeconds, ConvergeSeconds: r.ConvergeSeconds,
			SelectSeconds: r.Range.SelectSeconds, RSSPerPeer: float64(r.RSSBytes) / ran, GoroutinesPer: float64(r.Goroutines) / ran, ConnsMean: r.ConnsMean,
			Wrong: r.Range.Wrong, Unserved: r.Range.Unserved})
		m.Peers = append(m.Peers, r.Peers...)
	}
	if next != m.N || len(m.Peers) != m.N {
		return nil, fmt.Errorf("%w: the reports hold %d peers up to %d, the overlay %d", errMerge, len(m.Peers), next, m.N)
	}
	byID := make(map[string]int, m.N)
	keys := make([]dht.Key, m.N)
	for k, p := range m.Peers {
		if p.Index != k {
			return nil, fmt.Errorf("%w: peer %d of the reports says it is peer %d", errMerge, k, p.Index)
		}
		id, err := peer.Decode(p.ID)
		if err != nil {
			return nil, fmt.Errorf("%w: peer %d: %v", errMerge, k, err)
		}
		keys[k], byID[p.ID] = dht.KeyOf(id), k
	}
	lists := map[string]map[string]bool{}
	for _, r := range parts {
		for sp, cs := range r.Range.Clients {
			set := map[string]bool{}
			for _, c := range cs {
				set[c] = true
			}
			lists[sp] = set
		}
	}
	a := make(metrics.Assignment, m.N)
	var sps []int
	for k, p := range m.Peers {
		a[k] = metrics.Unassigned
		j, ok := byID[p.Superpeer]
		if !ok {
			continue
		}
		if j != k && !lists[p.Superpeer][p.ID] {
			// Attached, by the client's report, to a superpeer whose
			// report does not list it: counted wrong, not served.
			m.ListedNot++
			continue
		}
		a[k] = j
		if j == k {
			sps = append(sps, k)
		}
	}
	S, capacity := first.Range.Superpeers, first.Range.Capacity
	scheme, err := prefixScheme(S, first.Range.Pow2)
	if err != nil {
		return nil, fmt.Errorf("%w: S %d: %v", errMerge, S, err)
	}
	all := make([]int, m.N)
	for k := range all {
		all[k] = k
	}
	for _, k := range scheme.Superpeers(all, func(i int) dht.Key { return keys[i] }) {
		m.Expected = append(m.Expected, k)
	}
	slices.Sort(m.Expected)
	m.Exact = slices.Equal(m.Expected, sps)
	pl, _, err := openLatency(first.Range.LatencySpec, m.N, m.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: the overlay's matrix: %v", errMerge, err)
	}
	sum := swarm.SelectionSummary{Method: "prefix", Target: S, Groups: scheme.Groups(), Bits: scheme.Bits(), Count: len(sps), Capacity: capacity,
		Expected: scheme.ExpectedCount(m.N)}
	sum.Wrong = m.ListedNot
	for _, p := range m.Parts {
		sum.Wrong += p.Wrong
		sum.ConvergeSeconds = max(sum.ConvergeSeconds, p.SelectSeconds)
	}
	for k, j := range a {
		if j < 0 && m.Peers[k].Superpeer == "" {
			sum.Unserved++
		}
	}
	ev, err := metrics.Evaluate(pl, a, sps, capacity)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMerge, err)
	}
	sum.ClientsPerSuperpeer = swarm.LoadSummary{Max: ev.Load.Max, Mean: ev.Load.Mean, Gini: ev.Load.Gini}
	sum.ClientRTT = rttSummary(ev)
	rev, kev, err := yardsticks(pl, S, capacity, m.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMerge, err)
	}
	sum.RandomClientRTT, sum.KMedianClientRTT = rttSummary(rev), rttSummary(kev)
	m.Superpeers = &sum
	return m, nil
}

// raiseFileLimit lifts this process's open-file limit toward want (the
// soft limit to the hard one, and the hard one too where the process may):
// on real sockets every connection between two peers of the process is two
// descriptors, and a few hundred peers hold tens of thousands. It returns
// the soft limit in force.
func raiseFileLimit(want uint64) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur >= want {
		return l.Cur
	}
	if l.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			return want
		}
	}
	l.Cur = min(want, l.Max)
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return l.Cur
}
