//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	mrand "math/rand"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/metrics"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/experiments/testbed"
	"github.com/superpeer-overlay/superpeer/superpeer"
)

func init() {
	commands["testbed"] = command{
		summary: "run n `peer run` processes in network namespaces with matrix latencies, with faults (Linux, root)",
		run:     runTestbed,
	}
}

// testbedExe and testbedEnv are the program each namespace runs as `peer
// run` and its environment's additions: this binary by default; the tests
// run their own binary as the peer.
var (
	testbedExe string
	testbedEnv []string
)

// testbedReport is `peer testbed --json`: `peer swarm`'s report with the
// bed's own block.
type testbedReport struct {
	swarmReport
	Testbed *testbedBlock `json:"testbed"`
}

type testbedBlock struct {
	RunID  string `json:"run_id"`
	Shaper string `json:"shaper"`
	Subnet string `json:"subnet"`
	// Processes is how many `peer run` processes ran (one per namespace).
	Processes int `json:"processes"`
	// PeerNice is how much nicer than the bed the peers ran.
	PeerNice int `json:"peer_nice"`
	// UpSeconds is making the namespaces, veths and shaping;
	// StartSeconds, from then until every peer answered /status.
	UpSeconds    float64 `json:"up_seconds"`
	StartSeconds float64 `json:"start_seconds"`
	// PeerRSS is the peer processes' resident memory when the selection
	// converged, mean and max in bytes.
	PeerRSSMean uint64 `json:"peer_rss_mean_bytes"`
	PeerRSSMax  uint64 `json:"peer_rss_max_bytes"`
	// Vivaldi is the peers' coordinates' median and p90 relative error
	// against the matrix when the selection converged (coordinate methods).
	Vivaldi *[2]float64 `json:"vivaldi_error,omitempty"`
	// RTT is the peers' `--rtt` (coordinate methods), TransportShare the
	// share of their samples whose RTT was the transport's when the
	// selection converged.
	RTT            string                  `json:"rtt,omitempty"`
	TransportShare *float64                `json:"vivaldi_transport_share,omitempty"`
	Delay          *testbed.DelayStats     `json:"delay_line,omitempty"`
	Cut            *cutReport              `json:"cut,omitempty"`
	Partition      *partitionReport        `json:"partition,omitempty"`
	Loss           float64                 `json:"loss"`
	JitterMs       float64                 `json:"jitter_ms"`
	Final          *swarm.SelectionSummary `json:"superpeers_final,omitempty"`
	// Relay is the NAT'd peers' relays (--nat).
	Relay *relayReport `json:"relay,omitempty"`
	// LeftBehind is what teardown could not remove (empty: nothing).
	LeftBehind string `json:"left_behind,omitempty"`
}

// cutReport is one namespace cut off (its bridge port down) and brought
// back.
type cutReport struct {
	Peer         int     `json:"peer"`
	WasSuperpeer bool    `json:"was_superpeer"`
	Seconds      float64 `json:"seconds"`
	// RestSeconds is how long the others took to converge without it
	// (-1: not within the cut).
	RestSeconds float64 `json:"rest_seconds"`
	// RecoverSeconds is from bringing it back until the selection (with
	// it) had converged again.
	RecoverSeconds float64                 `json:"recover_seconds"`
	After          *swarm.SelectionSummary `json:"superpeers_after"`
}

// partitionReport is the bed split into two halves for a while and healed.
type partitionReport struct {
	Sizes   [2]int  `json:"sizes"`
	Seconds float64 `json:"seconds"`
	// SuperpeersDuring is how many superpeers each half had at the end of
	// the split.
	SuperpeersDuring [2]int `json:"superpeers_during"`
	// HealSeconds is from the heal until exactly S superpeers (no
	// duplicate token, with repel; the ones all keys call for, with
	// prefix) with every client attached.
	HealSeconds float64                 `json:"heal_seconds"`
	Healed      bool                    `json:"healed"`
	After       *swarm.SelectionSummary `json:"superpeers_after"`
}

// tbFlags are the bed's settings.
type tbFlags struct {
	n, S, capacity          int
	method                  string
	pow2, killSP            bool
	ttl, refresh            time.Duration
	settle, dead, announce  time.Duration
	survey, vivInterval     time.Duration
	rtt                     string
	force                   string
	kill                    float64
	cut, partition, timeout time.Duration
	startRate               float64
	// nat marks the peers behind NAT (nil: none); relay is their relays'
	// mode, relayPairs how many NAT'd pairs are pinged.
	nat        []bool
	relay      string
	relayPairs int
	// transports are what the peers listen on and dial: "tcp", "quic".
	transports []string
}

// transportAddr is the multiaddr of transport t ("tcp", "quic") at host
// (an /ip4 or /dns4 component) on the peers' port.
func transportAddr(host, t string) string {
	if t == "quic" {
		return host + "/udp/4001/quic-v1"
	}
	return host + "/tcp/4001"
}

func runTestbed(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("testbed", stderr)
	n := fs.Int("n", 100, "peers: one namespace and one `peer run` process each")
	lat := fs.String("latency", latency.Default, "latency source: planetlab-490, seattle-99, synthetic[:clusters,heavytail] or a matrix file")
	seed := fs.Int64("seed", 0, "random seed (0 picks one from the clock; it is printed): identities (the same peer IDs as `peer swarm --seed`), placement, bootstrap choices, faults")
	jsonOut := fs.String("json", "", "write the machine-readable report to this file")
	method := fs.String("method", "prefix", "the selection method every peer runs: "+strings.Join(methodNames(), " or "))
	superpeers := fs.Int("superpeers", 8, "S, the number of superpeers wanted")
	pow2 := fs.Bool("pow2", false, "prefix: Lo et al.'s 2^⌈log2 S⌉ groups instead of exactly S")
	capacity := fs.Int("capacity", 0, "C, the most clients a superpeer serves (0: twice the mean load, 2⌈n/S⌉)")
	ttl := fs.Duration("ttl", 9*time.Second, fmt.Sprintf("attachment lifetime without renewal (`peer run --ttl`; with repel at least and by default %v)", repelMinTTL))
	refresh := fs.Duration("refresh", time.Minute, "routing-table refresh interval (`peer run --refresh`)")
	kill := fs.Float64("kill", 0, "last fault: kill -9 this fraction of the peers at random and measure recovery")
	killSP := fs.Bool("kill-superpeers", false, "with the kill, also kill every superpeer (and token holder)")
	cut := fs.Duration("cut", 0, "first fault: cut one superpeer's namespace off (its bridge port down) for this long, bring it back and measure recovery (0: none)")
	partition := fs.Duration("partition", 0, "second fault: split the bed into two random halves for this long, heal, and measure until exactly S superpeers serve every client (0: none)")
	shaper := fs.String("shaper", "auto", "how the delays are made: netem (an HTB class and netem qdisc per destination in each namespace), tun (a user-space delay line in a router namespace, for kernels without sch_netem), or auto (netem if the kernel has it)")
	loss := fs.Float64("loss", 0, "chance a packet is dropped on its way out of a namespace, [0, 1)")
	jitter := fs.Duration("jitter", 0, "the most a packet's one-way delay varies either way")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up on any one wait (start, convergence, recovery) after this long")
	peerNice := fs.Int("peer-nice", testbed.PeerNice, "run the peer processes this much nicer than the bed (0 to 19): the bed's delay line is the network and must not wait for their CPU")
	startRate := fs.Float64("start-rate", 20, "peer processes started per second")
	cleanup := fs.Bool("cleanup", false, "remove every namespace and link named "+testbed.Prefix+"* (leftovers of an interrupted bed, killing what runs in them) and exit")
	logs := fs.String("logs", "", "keep every peer's log in this directory (default: a temporary one, removed unless the run fails)")
	def := swarm.RepelSwarmConfig(1, 0)
	force := fs.String("force", "attract", "repel: the force model, repulsion or attract")
	settle := fs.Duration("settle", def.SettleAfter, "repel: T_settle (`peer run --settle`)")
	dead := fs.Duration("dead", def.DeadAfter, "repel: T_dead (`peer run --dead`)")
	announce := fs.Duration("announce", def.AnnounceInterval, "repel: announcement interval (`peer run --announce`)")
	survey := fs.Duration("survey", def.SurveyInterval, "repel: survey delay after settling (`peer run --survey`; 0: no surveys)")
	vivInterval := fs.Duration("vivaldi-interval", time.Second, "repel: Vivaldi sampling interval (`peer run --vivaldi-interval`)")
	rttFlag := fs.String("rtt", "transport", "repel: a Vivaldi sample's RTT (`peer run --rtt`): transport (the kernel's TCP RTT or quic-go's) or exchange (timed by the peer)")
	natFrac := fs.Float64("nat", 0, fmt.Sprintf("put this fraction of the peers (never the first %d, everyone's way in) each behind a masquerading NAT of its own; they run `--reachability private` and cannot be superpeers (prefix, with an ID puzzle of %d bits their identities fail)", natBoot, natPuzzle))
	relayMode := fs.String("relay", "superpeer", "with --nat: the NAT'd peers' relays (`peer run --relay`): superpeer (their superpeers' relays, bounded by the capacity) or random (go-libp2p's relay on every public peer, AutoRelay's random choice)")
	relayPairs := fs.Int("relay-pairs", 40, "with --nat: how many pairs of NAT'd peers ping each other over their relays")
	transport := fs.String("transport", "auto", "what the peers listen on and dial: tcp,quic, tcp or quic; auto is tcp for --method repel (its Vivaldi RTTs are then the kernel's, measured when ACKs arrive; quic-go's are measured in the peer's process, which 120 peers on two cores keep waiting) and tcp,quic otherwise")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *method == "repel" && !flagSet(fs, "ttl") {
		*ttl = repelMinTTL
	}
	if *cleanup {
		if err := testbed.Available(); err != nil {
			return err
		}
		if err := testbed.Cleanup(testbed.Prefix, func(f string, a ...any) { fmt.Fprintf(stdout, f+"\n", a...) }); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "no namespace or link named %s* is left\n", testbed.Prefix)
		return nil
	}
	if *transport == "auto" {
		*transport = "tcp,quic"
		if *method == "repel" {
			*transport = "tcp"
		}
	}
	m, lerr := superpeer.Lookup(*method)
	switch {
	case lerr != nil:
		return fmt.Errorf("%w: --method %q: %v (one method per bed)", errUsage, *method, lerr)
	case *n < 2 || *n > testbed.MaxPeers:
		return fmt.Errorf("%w: --n %d: want 2 … %d", errUsage, *n, testbed.MaxPeers)
	case *superpeers < 1 || *superpeers >= *n:
		return fmt.Errorf("%w: --superpeers %d must be in [1, n)", errUsage, *superpeers)
	case *method == "repel" && *ttl < repelMinTTL:
		return fmt.Errorf("%w: --ttl %v: with --method repel it must be at least %v (`peer run`'s rule)", errUsage, *ttl, repelMinTTL)
	case *capacity < 0:
		return fmt.Errorf("%w: --capacity %d is negative", errUsage, *capacity)
	case !(*kill >= 0 && *kill < 1):
		return fmt.Errorf("%w: --kill %v must be in [0, 1)", errUsage, *kill)
	case *cut < 0 || *partition < 0 || *timeout <= 0 || *jitter < 0:
		return fmt.Errorf("%w: --cut, --partition and --jitter must not be negative, --timeout positive", errUsage)
	case !(*loss >= 0 && *loss < 1):
		return fmt.Errorf("%w: --loss %v must be in [0, 1)", errUsage, *loss)
	case *shaper != "auto" && *shaper != string(testbed.Netem) && *shaper != string(testbed.TUN):
		return fmt.Errorf("%w: --shaper %q: want auto, netem or tun", errUsage, *shaper)
	case *transport != "tcp,quic" && *transport != "tcp" && *transport != "quic":
		return fmt.Errorf("%w: --transport %q: want tcp,quic, tcp or quic", errUsage, *transport)
	case *rttFlag != "transport" && *rttFlag != "exchange":
		return fmt.Errorf("%w: --rtt %q: want transport or exchange", errUsage, *rttFlag)
	case *peerNice < 0 || *peerNice > 19:
		return fmt.Errorf("%w: --peer-nice %d must be 0 to 19", errUsage, *peerNice)
	case !(*startRate > 0):
		return fmt.Errorf("%w: --start-rate %v must be positive", errUsage, *startRate)
	case !(*natFrac >= 0 && *natFrac < 1):
		return fmt.Errorf("%w: --nat %v must be in [0, 1)", errUsage, *natFrac)
	case *natFrac > 0 && m.Name != "prefix":
		return fmt.Errorf("%w: --nat needs --method prefix (its ID puzzle keeps NAT'd peers from being superpeers; repel has no such rule)", errUsage)
	case *relayMode != "superpeer" && *relayMode != "random":
		return fmt.Errorf("%w: --relay %q: want superpeer or random", errUsage, *relayMode)
	case *relayPairs < 1:
		return fmt.Errorf("%w: --relay-pairs %d must be positive", errUsage, *relayPairs)
	}
	if *natFrac > 0 && natPeers(*n, *natFrac, mrand.New(mrand.NewSource(0))) == nil {
		return fmt.Errorf("%w: --nat %v puts no peer behind NAT at n = %d (the first %d stay public)", errUsage, *natFrac, *n, natBoot)
	}
	if err := testbed.Available(); err != nil {
		return err
	}
	pl, latName, err := placePeers(*lat, *n, *superpeers, capacity, seed, stdout)
	if err != nil {
		return err
	}
	var nat []bool
	if *natFrac > 0 {
		// After placePeers, which prints the seed (and draws one for 0).
		nat = natPeers(*n, *natFrac, mrand.New(mrand.NewSource(*seed+1000*8)))
	}
	f := tbFlags{n: *n, S: *superpeers, capacity: *capacity, method: m.Name, pow2: *pow2, killSP: *killSP,
		ttl: *ttl, refresh: *refresh, settle: *settle, dead: *dead, announce: *announce, survey: *survey,
		vivInterval: *vivInterval, rtt: *rttFlag, force: *force, kill: *kill, cut: *cut, partition: *partition, timeout: *timeout, startRate: *startRate,
		relay: *relayMode, relayPairs: *relayPairs, nat: nat, transports: strings.Split(*transport, ",")}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
	}

	runID := newRunID()
	sh := testbed.Shaper(*shaper)
	if *shaper == "auto" {
		sh = testbed.TUN
		if testbed.ProbeNetem(runID) {
			sh = testbed.Netem
		}
	}
	octet, err := pickOctet(runID)
	if err != nil {
		return err
	}
	plan, err := testbed.NewPlan(testbed.Config{N: *n, RunID: runID, Octet: octet, RTT: pl, Shaper: sh, Loss: *loss, Jitter: *jitter, NAT: f.nat})
	if err != nil {
		return err
	}
	logDir := *logs
	keepLogs := logDir != ""
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", testbed.Prefix+runID+"-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil && !keepLogs {
			fmt.Fprintf(stderr, "peer logs kept in %s\n", logDir)
			keepLogs = true
		}
		if !keepLogs {
			os.RemoveAll(logDir)
		}
	}()
	fmt.Fprintf(stdout, "bed %s: %d namespaces on %s, %s shaper, peers' logs in %s\n", runID, *n, plan.Subnet(), sh, logDir)

	tb := &bedRun{f: f, plan: plan, pl: pl, logDir: logDir, logf: logf, seed: *seed, method: m}
	t0 := time.Now()
	bed, err := testbed.Up(ctx, plan, *seed, logf)
	if err != nil {
		return err
	}
	bed.PeerNice = *peerNice
	tb.bed = bed
	rep := &testbedReport{
		swarmReport: swarmReport{N: *n, Seed: *seed, Latency: latName, Transport: "netns (" + strings.ReplaceAll(*transport, ",", ", ") + ")", Args: args, Dilation: 1, Method: m.Name},
		Testbed:     &testbedBlock{RunID: runID, Shaper: string(sh), Subnet: plan.Subnet().String(), Processes: *n, PeerNice: *peerNice, Loss: *loss, JitterMs: float64(*jitter) / float64(time.Millisecond)},
	}
	rep.Testbed.UpSeconds = time.Since(t0).Seconds()
	defer func() {
		tb.stopAll()
		if err != nil && bed.Delay != nil {
			st := bed.Delay.Stats()
			logf("delay line: %d packets, %d delayed, %d dropped by partition; late by p50 %.2f ms, p99 %.2f ms, max %.1f ms", st.Packets, st.Delayed, st.DroppedPartition, st.LateMs[0], st.LateMs[1], st.LateMs[2])
		}
		if derr := bed.Down(); derr != nil {
			rep.Testbed.LeftBehind = derr.Error()
			err = errors.Join(err, derr)
		} else {
			logf("bed %s removed: no namespace or link of it is left", runID)
		}
	}()
	if err := tb.run(ctx, rep); err != nil {
		return err
	}
	tb.print(stdout, rep)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report           %s\n", *jsonOut)
	}
	return nil
}

// newRunID is four random hex digits that no namespace of a running bed
// has.
func newRunID() string {
	for {
		var b [2]byte
		_, _ = rand.Read(b[:])
		id := fmt.Sprintf("%04x", binary.BigEndian.Uint16(b[:]))
		if nss, links, err := testbed.Leftovers(testbed.Prefix + id); err != nil || len(nss)+len(links) == 0 {
			return id
		}
	}
}

// pickOctet chooses the bed's 10.x.0.0/16 among those the machine does not
// use.
func pickOctet(runID string) (int, error) {
	var out []byte
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		b, err := exec.Command("ip", args...).Output()
		if err != nil {
			return 0, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		out = append(out, b...)
	}
	h, _ := strconv.ParseUint(runID, 16, 32)
	return testbed.PickOctet(testbed.UsedPrefixes(string(out)), int(h))
}

// testbedIdentity is peer i's key, derived from the seed as `peer swarm`'s
// are, so that the same seed gives the same peer IDs: the first key of
// peer i's seeded sequence whose ID passes want (nil: the first; a bed
// with NAT'd peers skips keys to give only public peers an ID that solves
// the puzzle).
func testbedIdentity(seed int64, i int, want func(peer.ID) bool) (crypto.PrivKey, error) {
	r := mrand.New(mrand.NewSource(seed*1_000_003 + int64(i)))
	for {
		sk, _, err := crypto.GenerateEd25519Key(r)
		if err != nil {
			return nil, err
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			return nil, err
		}
		if want == nil || want(id) {
			return sk, nil
		}
	}
}

// bedRun is one bed's peers and what is known of them.
type bedRun struct {
	f      tbFlags
	plan   *testbed.Plan
	pl     *latency.Placement
	bed    *testbed.Bed
	method superpeer.Method
	logDir string
	logf   func(string, ...any)
	seed   int64

	procs  []*testbed.Proc
	view   testbed.View
	poller *testbed.Poller
	dead   []bool
	begun  time.Time // every process started
}

func (tb *bedRun) rng(k int64) *mrand.Rand { return mrand.New(mrand.NewSource(tb.seed + 1000*k)) }

// peerArgs is peer i's `peer run` command line.
func (tb *bedRun) peerArgs(i int, boot []int) []string {
	f, p := tb.f, tb.plan
	a := p.PeerAddr(i).String()
	var args []string
	for _, t := range f.transports {
		args = append(args, "--listen", transportAddr("/ip4/"+a, t))
	}
	args = append([]string{"run"}, append(args,
		"--key", filepath.Join(tb.logDir, fmt.Sprintf("peer-%d.key", i)),
		"--http", net.JoinHostPort(a, strconv.Itoa(testbed.StatusPort)),
		"--method", f.method, "--superpeers", strconv.Itoa(f.S), "--capacity", strconv.Itoa(f.capacity),
		"--ttl", f.ttl.String(), "--refresh", f.refresh.String(),
	)...)
	if f.pow2 {
		args = append(args, "--pow2")
	}
	if f.method == "repel" {
		args = append(args, "--settle", f.settle.String(), "--dead", f.dead.String(), "--announce", f.announce.String(),
			"--survey", f.survey.String(), "--vivaldi-interval", f.vivInterval.String(), "--force", f.force, "--rtt", f.rtt)
	}
	if f.nat != nil {
		reach := "public"
		if f.nat[i] {
			reach = "private"
		}
		args = append(args, "--id-puzzle", strconv.Itoa(natPuzzle), "--relay", f.relay, "--reachability", reach)
		if !f.nat[i] {
			// The relays' names (the bed's addresses are private to
			// go-libp2p, which builds relayed addresses from public
			// ones only).
			for _, t := range f.transports {
				args = append(args, "--advertise", transportAddr("/dns4/"+p.HostName(i), t))
			}
		}
	}
	for _, j := range boot {
		args = append(args, "--bootstrap", transportAddr("/ip4/"+p.Addr(j).String(), f.transports[0])+"/p2p/"+tb.view.IDs[j])
	}
	return args
}

// bootstrapOf picks up to three of the first peers for peer i to join
// through.
func bootstrapOf(i int, rng *mrand.Rand) []int {
	pool := min(i, 8)
	perm := rng.Perm(pool)
	return perm[:min(3, pool)]
}

// run starts the peers and takes the bed through convergence and the
// faults, filling rep.
func (tb *bedRun) run(ctx context.Context, rep *testbedReport) error {
	f := tb.f
	exe := testbedExe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	env := append(os.Environ(), testbedEnv...)
	if os.Getenv("GOMAXPROCS") == "" {
		// n processes share the machine's cores: more threads per process
		// only contend.
		env = append(env, "GOMAXPROCS=1")
	}
	tb.view = testbed.View{IDs: make([]string, f.n), Keys: make([]dht.Key, f.n), Live: make([]bool, f.n), Status: make([]*testbed.Status, f.n)}
	tb.dead = make([]bool, f.n)
	if f.nat != nil {
		tb.view.Eligible = make([]bool, f.n)
	}
	for i := 0; i < f.n; i++ {
		var want func(peer.ID) bool
		if f.nat != nil {
			nat := f.nat[i]
			want = func(id peer.ID) bool { return superpeer.SolvesPuzzle(id, natPuzzle) != nat }
			tb.view.Eligible[i] = !nat
		}
		sk, err := testbedIdentity(tb.seed, i, want)
		if err != nil {
			return err
		}
		b, err := crypto.MarshalPrivateKey(sk)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tb.logDir, fmt.Sprintf("peer-%d.key", i)), b, 0o600); err != nil {
			return err
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			return err
		}
		tb.view.IDs[i], tb.view.Keys[i] = id.String(), dht.KeyOf(id)
	}
	tb.poller = tb.bed.NewPoller(3 * time.Second)
	defer tb.poller.Close()
	t0 := time.Now()
	brng := tb.rng(1)
	tb.procs = make([]*testbed.Proc, f.n)
	for i := 0; i < f.n; i++ {
		argv := append([]string{exe}, tb.peerArgs(i, bootstrapOf(i, brng))...)
		p, err := tb.bed.Start(i, argv, env, filepath.Join(tb.logDir, fmt.Sprintf("peer-%d.log", i)))
		if err != nil {
			return fmt.Errorf("peer %d: %w", i, err)
		}
		tb.procs[i], tb.view.Live[i] = p, true
		if i == 0 {
			// The first peer is everyone's way in: wait until it answers.
			if _, err := tb.wait(ctx, "peer 0", func(v testbed.View) (bool, string) {
				_, err := tb.poller.Status(ctx, 0)
				return err == nil, fmt.Sprint(err)
			}, false); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(float64(time.Second) / f.startRate)):
		}
	}
	tb.begun = time.Now()
	tb.logf("%d peer processes started in %.1f s", f.n, time.Since(t0).Seconds())
	if _, err := tb.wait(ctx, "every peer answers", func(v testbed.View) (bool, string) {
		st := v.DHT()
		return st.Unanswered == 0, fmt.Sprintf("%d unanswered", st.Unanswered)
	}, true); err != nil {
		return err
	}
	rep.Testbed.StartSeconds = time.Since(t0).Seconds()
	rep.BuildSeconds = rep.Testbed.UpSeconds + rep.Testbed.StartSeconds
	// The overlay's convergence (every routing table holds its nearest
	// peer) is recorded on the way, not waited for: the selectors run from
	// each peer's bootstrap, and kad-dht's refresh may take minutes to
	// fill the last routing tables.
	rep.ConvergeSeconds = -1
	if _, err := tb.wait(ctx, "selection", func(v testbed.View) (bool, string) {
		if rep.ConvergeSeconds < 0 && v.DHT().Converged() {
			rep.ConvergeSeconds = time.Since(tb.begun).Seconds()
			tb.logf("overlay converged %.1f s after the last start", rep.ConvergeSeconds)
		}
		return tb.converged(v)
	}, true); err != nil {
		return err
	}
	conv := time.Since(tb.begun)
	sum, err := tb.summary(conv)
	if err != nil {
		return err
	}
	tb.logf("selection converged %.1f s after the last start: %d superpeers", conv.Seconds(), sum.Count)
	mr := &methodReport{Method: f.method, Superpeers: sum}
	rep.Methods = []*methodReport{mr}
	rep.Superpeers = sum
	var rss []uint64
	for i, p := range tb.procs {
		if !tb.dead[i] {
			rss = append(rss, p.RSS())
		}
	}
	for _, r := range rss {
		rep.RSSBytes += r
		rep.Testbed.PeerRSSMax = max(rep.Testbed.PeerRSSMax, r)
	}
	rep.Testbed.PeerRSSMean = rep.RSSBytes / uint64(max(len(rss), 1))
	if tb.method.Coordinates {
		med, p90 := tb.view.VivaldiError(tb.pl)
		rep.Testbed.Vivaldi = &[2]float64{med, p90}
		rep.Testbed.RTT = f.rtt
		if share := tb.view.TransportShare(); !math.IsNaN(share) {
			rep.Testbed.TransportShare = &share
		}
	}
	if f.nat != nil {
		if rep.Testbed.Relay, err = tb.relayPhase(ctx, tb.begun.Add(conv)); err != nil {
			return err
		}
	}
	if f.cut > 0 {
		if rep.Testbed.Cut, err = tb.cutOne(ctx); err != nil {
			return err
		}
	}
	if f.partition > 0 {
		if rep.Testbed.Partition, err = tb.split(ctx); err != nil {
			return err
		}
	}
	if f.kill > 0 || f.killSP {
		if mr.Kill, err = tb.killSome(ctx); err != nil {
			return err
		}
		rep.Kill = mr.Kill
	}
	final, err := tb.summary(conv)
	if err != nil {
		return err
	}
	rep.Testbed.Final = final
	mr.SuperpeerOf = make([]int, f.n)
	rs := tb.view.Roles(f.capacity)
	for i := range mr.SuperpeerOf {
		mr.SuperpeerOf[i] = rs.Assignment[i]
	}
	for i := 0; i < f.n; i++ {
		pr := peerReport{ID: tb.view.IDs[i], Key: tb.view.Keys[i].Hex(), Host: tb.pl.Host(i), Dead: tb.dead[i]}
		switch j := rs.Assignment[i]; {
		case tb.dead[i]:
			pr.Role = "dead"
		case j == i:
			pr.Role, pr.Superpeer = superpeer.Superpeer.String(), pr.ID
		case j >= 0:
			pr.Role, pr.Superpeer = superpeer.Client.String(), tb.view.IDs[j]
		default:
			pr.Role = superpeer.Client.String()
		}
		rep.Peers = append(rep.Peers, pr)
	}
	if tb.bed.Delay != nil {
		st := tb.bed.Delay.Stats()
		rep.Testbed.Delay = &st
	}
	return nil
}

// stopAll kills every peer process still running, all at once.
func (tb *bedRun) stopAll() {
	var wg sync.WaitGroup
	for _, p := range tb.procs {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.Kill() }()
		}
	}
	wg.Wait()
}

// pollEvery is how often the bed reads every status: every 500 ms, less
// often above 50 peers (10 ms a peer), so that reading does not load the
// machine the peers share.
func (tb *bedRun) pollEvery() time.Duration {
	return max(500*time.Millisecond, time.Duration(tb.f.n)*10*time.Millisecond)
}

// poll refreshes the live peers' statuses.
func (tb *bedRun) poll(ctx context.Context) {
	st := tb.poller.All(ctx, tb.view.Live, 16)
	for i := range st {
		if tb.view.Live[i] {
			tb.view.Status[i] = st[i]
		}
	}
}

// wait polls until cond holds, logging its state every 5 s, and fails
// after --timeout or when a peer process has died that was not killed.
func (tb *bedRun) wait(ctx context.Context, what string, cond func(testbed.View) (bool, string), poll bool) (time.Duration, error) {
	t0 := time.Now()
	lastLog := t0
	for {
		if poll {
			tb.poll(ctx)
		}
		ok, state := cond(tb.view)
		if ok {
			return time.Since(t0), nil
		}
		for i, p := range tb.procs {
			if p == nil || tb.dead[i] {
				continue
			}
			select {
			case <-p.Exited():
				return 0, fmt.Errorf("%s: peer %d exited: %v (log %s)", what, i, p.Err(), filepath.Join(tb.logDir, fmt.Sprintf("peer-%d.log", i)))
			default:
			}
		}
		if time.Since(t0) > tb.f.timeout {
			return 0, fmt.Errorf("%s: not within --timeout %v: %s", what, tb.f.timeout, state)
		}
		if time.Since(lastLog) >= 5*time.Second {
			tb.logf("%s: %s (%.0f s)", what, state, time.Since(t0).Seconds())
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(tb.pollEvery()):
		}
	}
}

// scheme is the prefix method's groups.
func (tb *bedRun) scheme() superpeer.Prefix {
	s, _ := prefixScheme(tb.f.S, tb.f.pow2)
	return s
}

// prefixScheme is the prefix method's groups for S superpeers: exactly S,
// or with pow2 Lo et al.'s 2^⌈log2 S⌉.
func prefixScheme(S int, pow2 bool) (superpeer.Prefix, error) {
	if pow2 {
		return superpeer.Pow2(bits.Len(uint(max(S, 1) - 1)))
	}
	return superpeer.Exact(S)
}

// converged is the method's own convergence condition over the live peers
// (as `peer swarm`'s): prefix exact; repel every token held once, settled
// and surveyed; any other method settled.
func (tb *bedRun) converged(v testbed.View) (bool, string) {
	switch tb.f.method {
	case "prefix":
		st := v.Prefix(tb.scheme(), tb.f.capacity)
		return st.Exact(), st.RoleState.String()
	case "repel":
		st := v.Repel(tb.f.S, tb.f.capacity)
		return st.Converged(tb.f.S, tb.f.survey > 0), st.String()
	default:
		st := v.Roles(tb.f.capacity)
		return st.Settled(), st.String()
	}
}

// healed is the partition's end: exactly S superpeers with every client
// attached — the ones all keys call for with prefix, every token held once
// and settled with repel.
func (tb *bedRun) healed(v testbed.View) (bool, string) {
	switch tb.f.method {
	case "prefix":
		st := v.Prefix(tb.scheme(), tb.f.capacity)
		return st.Exact() && st.Attached(len(st.Expected)), st.RoleState.String()
	case "repel":
		st := v.Repel(tb.f.S, tb.f.capacity)
		return st.TokensBack() && st.Unsettled == 0 && st.Attached(tb.f.S), st.String()
	default:
		st := v.Roles(tb.f.capacity)
		return st.Attached(tb.f.S), st.String()
	}
}

// summary scores the current selection over the live peers.
func (tb *bedRun) summary(conv time.Duration) (*swarm.SelectionSummary, error) {
	live := tb.view.LiveIndices()
	rs := tb.view.Roles(tb.f.capacity)
	var (
		wrong    = rs.Wrong
		groups   = tb.f.S
		expected = float64(tb.f.S)
		bits     int
		book     float64
	)
	if tb.f.method == "prefix" {
		sc := tb.scheme()
		st := tb.view.Prefix(sc, tb.f.capacity)
		wrong, groups, bits = st.Wrong, sc.Groups(), sc.Bits()
		expected = sc.ExpectedCount(len(live))
		book = metrics.BookPrefixCount(float64(len(live)), sc.Bits(), dht.KeyBits)
	}
	sum, err := testbed.Summarize(tb.f.method, tb.pl, live, rs.Assignment, rs.Superpeers, rs.Unserved, wrong, groups, tb.f.capacity, conv, tb.rng(3))
	if err != nil {
		return nil, err
	}
	sum.Bits, sum.Expected, sum.Book = bits, expected, book
	return &sum, nil
}

// cutOne cuts a superpeer's namespace off for --cut and brings it back.
func (tb *bedRun) cutOne(ctx context.Context) (*cutReport, error) {
	rs := tb.view.Roles(tb.f.capacity)
	live := tb.view.LiveIndices()
	victim := live[tb.rng(5).Intn(len(live))]
	wasSP := false
	if len(rs.Superpeers) > 0 {
		victim, wasSP = rs.Superpeers[tb.rng(5).Intn(len(rs.Superpeers))], true
	}
	tb.logf("cutting peer %d off (superpeer: %v) for %v", victim, wasSP, tb.f.cut)
	if err := tb.bed.Cut(victim); err != nil {
		return nil, err
	}
	t0 := time.Now()
	tb.view.Live[victim], tb.view.Status[victim] = false, nil
	cr := &cutReport{Peer: victim, WasSuperpeer: wasSP, Seconds: tb.f.cut.Seconds(), RestSeconds: -1}
	for time.Since(t0) < tb.f.cut {
		tb.poll(ctx)
		if ok, _ := tb.converged(tb.view); ok && cr.RestSeconds < 0 {
			cr.RestSeconds = time.Since(t0).Seconds()
			tb.logf("the others converged without peer %d after %.1f s", victim, cr.RestSeconds)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(tb.pollEvery()):
		}
	}
	if err := tb.bed.Restore(victim); err != nil {
		return nil, err
	}
	tb.view.Live[victim] = true
	d, err := tb.wait(ctx, "after the cut", tb.converged, true)
	if err != nil {
		return nil, err
	}
	cr.RecoverSeconds = d.Seconds()
	tb.logf("converged again %.1f s after peer %d came back", d.Seconds(), victim)
	if cr.After, err = tb.summary(d); err != nil {
		return nil, err
	}
	return cr, nil
}

// split partitions the live peers into two random halves for --partition,
// heals, and measures until exactly S superpeers serve every client.
func (tb *bedRun) split(ctx context.Context) (*partitionReport, error) {
	live := tb.view.LiveIndices()
	perm := tb.rng(6).Perm(len(live))
	order := make([]int, len(live))
	for k, x := range perm {
		order[k] = live[x]
	}
	side := testbed.Half(order, tb.f.n)
	pr := &partitionReport{Seconds: tb.f.partition.Seconds()}
	for _, i := range live {
		pr.Sizes[side[i]-1]++
	}
	tb.logf("splitting the bed into halves of %d and %d for %v", pr.Sizes[0], pr.Sizes[1], tb.f.partition)
	if err := tb.bed.Partition(side); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(tb.f.partition):
	}
	tb.poll(ctx)
	for _, i := range tb.view.Roles(tb.f.capacity).Superpeers {
		pr.SuperpeersDuring[side[i]-1]++
	}
	tb.logf("superpeers at the end of the split: %d and %d", pr.SuperpeersDuring[0], pr.SuperpeersDuring[1])
	if err := tb.bed.Heal(); err != nil {
		return nil, err
	}
	d, err := tb.wait(ctx, "after the heal", tb.healed, true)
	if err != nil {
		return nil, err
	}
	pr.HealSeconds, pr.Healed = d.Seconds(), true
	tb.logf("healed: exactly %d superpeers, every client attached, %.1f s after the heal", tb.f.S, d.Seconds())
	if pr.After, err = tb.summary(d); err != nil {
		return nil, err
	}
	// The method's full condition (surveys with repel) before the next
	// fault.
	if _, err := tb.wait(ctx, "converged after the heal", tb.converged, true); err != nil {
		return nil, err
	}
	return pr, nil
}

// killSome kills -9 a fraction of the live peers (and, with
// --kill-superpeers, every superpeer and token holder) and measures
// recovery.
func (tb *bedRun) killSome(ctx context.Context) (*killReport, error) {
	live := tb.view.LiveIndices()
	rng := tb.rng(4)
	rng.Shuffle(len(live), func(a, b int) { live[a], live[b] = live[b], live[a] })
	chosen := map[int]bool{}
	for _, i := range live[:int(tb.f.kill*float64(len(live))+0.5)] {
		chosen[i] = true
	}
	rs := tb.view.Roles(tb.f.capacity)
	isSP := map[int]bool{}
	for _, i := range rs.Superpeers {
		isSP[i] = true
	}
	if tb.f.killSP {
		for _, i := range tb.view.LiveIndices() {
			if isSP[i] || (tb.view.Status[i] != nil && tb.view.Status[i].Token != nil) {
				chosen[i] = true
			}
		}
	}
	var victims []int
	for i := range chosen {
		victims = append(victims, i)
	}
	sort.Ints(victims)
	kr := &killReport{Fraction: tb.f.kill, Superpeers: tb.f.killSP, Killed: len(victims)}
	if tb.f.method == "repel" {
		kr.BoundSeconds = (tb.f.dead + tb.f.settle).Seconds()
	}
	for _, i := range victims {
		if isSP[i] {
			kr.KilledSuper++
		}
	}
	tb.logf("kill -9 %d peers (%d superpeers)", len(victims), kr.KilledSuper)
	for _, i := range victims {
		tb.procs[i].Kill()
		tb.dead[i], tb.view.Live[i], tb.view.Status[i] = true, false, nil
	}
	t0 := time.Now()
	if tb.f.method == "repel" {
		if _, err := tb.wait(ctx, "tokens back", func(v testbed.View) (bool, string) {
			st := v.Repel(tb.f.S, tb.f.capacity)
			return st.TokensBack(), st.String()
		}, true); err != nil {
			return nil, err
		}
		kr.TokensBackSeconds = time.Since(t0).Seconds()
	}
	if _, err := tb.wait(ctx, "after the kill", tb.converged, true); err != nil {
		return nil, err
	}
	d := time.Since(t0)
	kr.RecoverSeconds = d.Seconds()
	tb.logf("recovered %.1f s after the kill", d.Seconds())
	var err error
	kr.After, err = tb.summary(d)
	return kr, err
}

// print writes the human summary.
func (tb *bedRun) print(w io.Writer, rep *testbedReport) {
	t := rep.Testbed
	fmt.Fprintf(w, "peers            %d processes in %d namespaces over %s (%s shaper, %s)\n", rep.N, rep.N, rep.Latency, t.Shaper, t.Subnet)
	fmt.Fprintf(w, "bed up + start   %.1f s + %.1f s\n", t.UpSeconds, t.StartSeconds)
	if rep.ConvergeSeconds >= 0 {
		fmt.Fprintf(w, "overlay          converged %.1f s after the last start (every routing table holds its nearest peer)\n", rep.ConvergeSeconds)
	} else {
		fmt.Fprintf(w, "overlay          not converged when the selection was (some routing tables lack their nearest peer)\n")
	}
	fmt.Fprintf(w, "memory           %.1f MiB RSS per peer process (max %.1f), %.1f MiB in all\n", mib(t.PeerRSSMean), mib(t.PeerRSSMax), mib(rep.RSSBytes))
	if t.Vivaldi != nil {
		fmt.Fprintf(w, "vivaldi          median %.3f  p90 %.3f relative error when the selection converged\n", t.Vivaldi[0], t.Vivaldi[1])
		if t.TransportShare != nil {
			fmt.Fprintf(w, "vivaldi rtt      %s: %.0f%% of the samples the transport's own\n", t.RTT, 100**t.TransportShare)
		}
	}
	if r := t.Relay; r != nil {
		fmt.Fprintf(w, "relays (%s)  %d NAT'd peers each hold a relay %.1f s after the selection (%.1f relays each, %d with their own superpeer)\n", r.Mode, r.NATPeers, r.HeldSeconds, r.RelaysPerPeer, r.WithOwnSuperpeer)
		fmt.Fprintf(w, "relayed RTT      %d of %d NAT'd pairs: median %.1f ms measured, %.1f ms by the matrix through the relay used, %.1f through the best relay, %.1f direct; %.2f× the best relay (p90 %.2f×); %d through the target's superpeer\n",
			r.Pinged, len(r.Pairs), r.MeasuredMs, r.ViaMatrixMs, r.BestMs, r.DirectMs, r.RatioBest[0], r.RatioBest[1], r.ViaSuperpeer)
		fmt.Fprintf(w, "relay load       %d relays held, at most %d NAT'd peers on one, %d over the capacity %d\n", len(r.Load), r.LoadMax, r.Over, rep.Superpeers.Capacity)
	}
	fmt.Fprintln(w)
	printBedSelection(w, "selection", rep.Superpeers)
	if c := t.Cut; c != nil {
		rest := fmt.Sprintf("the others converged without it after %.1f s", c.RestSeconds)
		if c.RestSeconds < 0 {
			rest = "the others had not converged without it when it came back"
		}
		fmt.Fprintf(w, "cut              peer %d (superpeer %v) off for %.0f s; %s; converged again %.1f s after it came back\n",
			c.Peer, c.WasSuperpeer, c.Seconds, rest, c.RecoverSeconds)
	}
	if p := t.Partition; p != nil {
		fmt.Fprintf(w, "partition        halves of %d and %d for %.0f s (superpeers %d and %d at the end); healed: exactly %d superpeers, every client attached, %.1f s after\n",
			p.Sizes[0], p.Sizes[1], p.Seconds, p.SuperpeersDuring[0], p.SuperpeersDuring[1], p.After.Count, p.HealSeconds)
		printBedSelection(w, "after the heal", p.After)
	}
	if k := rep.Kill; k != nil {
		fmt.Fprintf(w, "killed           %d peers (%d superpeers) with kill -9; recovered in %.1f s\n", k.Killed, k.KilledSuper, k.RecoverSeconds)
		printBedSelection(w, "after the kill", k.After)
	}
	if d := t.Delay; d != nil {
		fmt.Fprintf(w, "delay line       %d packets: %d delayed, %d dropped by partition, %d by loss; late by p50 %.2f ms, p99 %.2f ms, max %.1f ms\n",
			d.Packets, d.Delayed, d.DroppedPartition, d.DroppedLoss, d.LateMs[0], d.LateMs[1], d.LateMs[2])
	}
}

// printBedSelection is printSelection without the traffic line: the bed
// does not read the peers' counters.
func printBedSelection(w io.Writer, title string, sum *swarm.SelectionSummary) {
	if sum.Bits > 0 {
		fmt.Fprintf(w, "%s (%s, S = %d in %d groups of up to %d bits, capacity %d):\n", title, sum.Method, sum.Target, sum.Groups, sum.Bits, sum.Capacity)
		fmt.Fprintf(w, "  superpeers       %d (expected %.2f)\n", sum.Count, sum.Expected)
	} else {
		fmt.Fprintf(w, "%s (%s, S = %d, capacity %d):\n", title, sum.Method, sum.Target, sum.Capacity)
		fmt.Fprintf(w, "  superpeers       %d\n", sum.Count)
	}
	fmt.Fprintf(w, "  converged in     %.1f s\n", sum.ConvergeSeconds)
	fmt.Fprintf(w, "  clients/superpeer max %d, mean %.1f, Gini %.3f; unserved %d, wrong %d\n", sum.ClientsPerSuperpeer.Max, sum.ClientsPerSuperpeer.Mean, sum.ClientsPerSuperpeer.Gini, sum.Unserved, sum.Wrong)
	ratio := func(a, b float64) float64 { return a / b }
	fmt.Fprintf(w, "  client RTT ms    mean %.1f  p50 %.1f  p90 %.1f   (%.2f× random, %.2f× the k-median)\n",
		sum.ClientRTT.Mean, sum.ClientRTT.P50, sum.ClientRTT.P90, ratio(sum.ClientRTT.Mean, sum.RandomClientRTT.Mean), ratio(sum.ClientRTT.Mean, sum.KMedianClientRTT.Mean))
	fmt.Fprintf(w, "  random RTT ms    mean %.1f  p50 %.1f  p90 %.1f (S random superpeers, each client with its nearest that has room)\n", sum.RandomClientRTT.Mean, sum.RandomClientRTT.P50, sum.RandomClientRTT.P90)
	fmt.Fprintf(w, "  k-median RTT ms  mean %.1f  p50 %.1f  p90 %.1f (centralised greedy k-median over the matrix)\n", sum.KMedianClientRTT.Mean, sum.KMedianClientRTT.P50, sum.KMedianClientRTT.P90)
	fmt.Fprintf(w, "  placement RTT ms mean %.1f  p50 %.1f  p90 %.1f (these superpeers, clients attached as the k-median's)\n", sum.PlacementClientRTT.Mean, sum.PlacementClientRTT.P50, sum.PlacementClientRTT.P90)
}
