package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/superpeer-overlay/superpeer/dht"
	"github.com/superpeer-overlay/superpeer/experiments/latency"
	"github.com/superpeer-overlay/superpeer/experiments/swarm"
	"github.com/superpeer-overlay/superpeer/internal/memlimit"
	"github.com/superpeer-overlay/superpeer/repel"
	"github.com/superpeer-overlay/superpeer/superpeer"
	"github.com/superpeer-overlay/superpeer/vivaldi"
)

func init() {
	commands["swarm"] = command{
		summary: "run n peers in this process over real latencies and report on them",
		run:     runSwarm,
	}
}

// swarmReport is the JSON report of `peer swarm --json`. Other tools read
// it: fields are only ever added.
type swarmReport struct {
	N         int    `json:"n"`
	Seed      int64  `json:"seed"`
	Latency   string `json:"latency"`
	Transport string `json:"transport"`
	// Range is set when this process ran a range of the overlay's peers
	// (--peers, --join): which, and how to join them.
	Range *rangeReport `json:"range,omitempty"`
	// Args are the command-line arguments of the run, to rerun it.
	Args      []string `json:"args"`
	GCPercent int      `json:"gc_percent"`
	// GoMaxProcs is the run's GOMAXPROCS (--gomaxprocs).
	GoMaxProcs int `json:"gomaxprocs"`
	// MemLimit is the runtime's soft memory limit in bytes once the DHT
	// converged (math.MaxInt64: none). With RSSTarget it is steered.
	MemLimit int64 `json:"mem_limit"`
	// RSSTarget is the RSS that --memlimit auto holds the process near,
	// by steering MemLimit (0: the limit was fixed).
	RSSTarget int64 `json:"rss_target,omitempty"`
	// OwnPeerstores: every mocknet host kept its own copy of what it
	// learned of its peers (--own-peerstores), not the swarm's interned one.
	OwnPeerstores bool `json:"own_peerstores,omitempty"`
	// Dilation is the time dilation of the selection phase (--dilate):
	// every figure is in the network's time.
	Dilation float64 `json:"dilation"`
	// WarmDilation is the Vivaldi warm-up's (--warm-dilate), when it
	// differs.
	WarmDilation float64 `json:"warm_dilation,omitempty"`
	// StallMs is --stall (ms of the network's time; 0: off), in effect
	// when the run has Vivaldi.
	StallMs float64 `json:"stall_ms"`
	// TTLSeconds is the attachment lifetime the selectors ran with
	// (--ttl, or swarm.TTLFor's for n).
	TTLSeconds   float64 `json:"ttl_seconds"`
	BuildSeconds float64 `json:"build_seconds"`
	// JoinRetries counts joins tried again through other peers;
	// JoinLookupFailures, joins left to convergence to mend (connected, but
	// the first lookup failed).
	JoinRetries        int64   `json:"join_retries"`
	JoinLookupFailures int64   `json:"join_lookup_failures"`
	ConvergeSeconds    float64 `json:"converge_seconds"`
	ConvergeMisses     int     `json:"converge_check_misses"`
	RSSBytes           uint64  `json:"rss_bytes"`
	Goroutines         int     `json:"goroutines"`
	ConnsMean          float64 `json:"connections_mean"`
	ConnsMax           int     `json:"connections_max"`
	Links              int     `json:"links"`
	// StuckIdentifies counts connections closed because identify had not
	// finished on them (mocknet ignores deadlines; see swarm.StuckIdentifies).
	StuckIdentifies int               `json:"stuck_identifies"`
	Lookup          swarm.LookupCheck `json:"lookup"`
	RawLookup       swarm.LookupCheck `json:"raw_lookup"`
	Peers           []peerReport      `json:"peers"`
	// Vivaldi is the live coordinates' median and p90 relative error
	// against the latency matrix, over all pairs of live peers, when the
	// selection started.
	Vivaldi *swarm.VivaldiSummary `json:"vivaldi,omitempty"`
	// Method names the methods run, separated by commas (none: the DHT
	// alone).
	Method string `json:"method"`
	// Methods are the selection methods run, one after another on the
	// same peers (--method).
	Methods []*methodReport `json:"methods"`
	// With one method, its block's fields also stand here, where they
	// stood before several methods could run: the selection after
	// convergence, how it was scored (repel), the kill, the hold, the coordinates' error once it
	// converged and what the tokens did (repel).
	Superpeers   *swarm.SelectionSummary `json:"superpeers,omitempty"`
	Kill         *killReport             `json:"kill,omitempty"`
	Rest         *restReport             `json:"rest,omitempty"`
	Hold         *holdReport             `json:"hold,omitempty"`
	VivaldiAfter *vivaldiError           `json:"vivaldi_after_selection,omitempty"`
	Repel        *swarm.RepelSummary     `json:"repel,omitempty"`
}

// coordReport is a peer's Vivaldi coordinate (seconds).
type coordReport struct {
	Vec    []float64 `json:"vec"`
	Height float64   `json:"height"`
	Error  float64   `json:"error"`
}

type killReport struct {
	Fraction       float64                 `json:"fraction"`
	Superpeers     bool                    `json:"superpeers"`
	Killed         int                     `json:"killed"`
	KilledSuper    int                     `json:"killed_superpeers"`
	RecoverSeconds float64                 `json:"recover_seconds"`
	After          *swarm.SelectionSummary `json:"superpeers_after"`
	// TokensBackSeconds (repel) is how long until every token was held by
	// exactly one live peer again; the bound is T_dead + T_settle.
	TokensBackSeconds float64 `json:"tokens_back_seconds,omitempty"`
	BoundSeconds      float64 `json:"bound_seconds,omitempty"`
	// RepelAfter is what the tokens did, counted from the start.
	RepelAfter *swarm.RepelSummary `json:"repel_after,omitempty"`
}

// restReport is how a repel selection was scored: once it had stayed
// converged, with the same token holders, for RestSeconds (Renewals renewal
// intervals) of the network's time; the selection's converge_seconds is
// when that resting state began, FirstConvergedSeconds when the selection
// was first consistent (every token held once and settled, every client
// served by a holder that lists it), ClientsMoved the clients served by
// another holder at the end of the rest than at its start. Up to
// InTransitAllowed clients (--in-transit of them) could be between holders
// at each reading of the rest; InTransitMax were at most, InTransitEnd at
// its end, and those are scored as unserved.
type restReport struct {
	Renewals              float64 `json:"renewals"`
	RestSeconds           float64 `json:"rest_seconds"`
	FirstConvergedSeconds float64 `json:"first_converged_seconds"`
	ClientsMoved          int     `json:"clients_moved"`
	InTransitFraction     float64 `json:"in_transit_fraction"`
	InTransitAllowed      int     `json:"in_transit_allowed"`
	InTransitMax          int     `json:"in_transit_max"`
	InTransitEnd          int     `json:"in_transit_end"`
}

// holdReport is the repel selection after the swarm ran on for HeldSeconds
// past its rest (and, if the tokens were moving then, until it converged
// again, with as many clients in transit as the rest allowed): whether the
// selection improves as the coordinates do.
type holdReport struct {
	HeldSeconds   float64                 `json:"held_seconds"`
	WaitedSeconds float64                 `json:"waited_seconds"`
	After         *swarm.SelectionSummary `json:"superpeers_after"`
	RepelAfter    *swarm.RepelSummary     `json:"repel_after"`
	VivaldiAfter  *vivaldiError           `json:"vivaldi_after"`
}

type peerReport struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	Key   string `json:"key"`
	Host  int    `json:"host"`
	// Dead is set for a peer killed by --kill.
	Dead bool `json:"dead,omitempty"`
	// Role (with one method) is client or superpeer at the end of the
	// run, "dead" for a killed peer; Superpeer is the peer ID it is
	// attached to, or its own. Every method's are in methods[].superpeer_of.
	Role      string `json:"role,omitempty"`
	Superpeer string `json:"superpeer,omitempty"`
	// Coord is its Vivaldi coordinate at the end of the run.
	Coord *coordReport `json:"coord,omitempty"`
}

// openLatency resolves --latency (see openMatrix) and places n peers on it;
// a measured matrix is filled first, as every link needs a latency.
func openLatency(spec string, n int, seed int64) (*latency.Placement, string, error) {
	base, name, err := openMatrix(spec, n, seed)
	if err != nil {
		return nil, "", err
	}
	if m, ok := base.(*latency.Matrix); ok {
		base = m.Filled()
	}
	pl, err := latency.Place(base, n, seed)
	if err != nil {
		return nil, "", err
	}
	return pl, name, nil
}

func runSwarm(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("swarm", stderr)
	n := fs.Int("n", 200, "number of peers")
	lat := fs.String("latency", latency.Default, "latency source: planetlab-490, seattle-99, synthetic[:clusters,heavytail] or a matrix file")
	seed := fs.Int64("seed", 0, "random seed (0 picks one from the clock; it is printed)")
	jsonOut := fs.String("json", "", "write the machine-readable report to this file")
	lookups := fs.Int("lookups", 100, "random-key lookups to check after convergence")
	rounds := fs.Int("max-rounds", 20, "self-lookup rounds before giving up on convergence")
	parallel := fs.Int("parallel", 2048, "peers joining at once (joins wait on link latency, so many at once pay)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	stallTrace := fs.String("stall-trace", "", "keep the runtime's execution trace of the last 15 s (runtime/trace's flight recorder) and write it at the first four stalls of a second or more that the --stall watch sees, 30 s apart: to this file, then FILE.2, FILE.3, FILE.4 (go tool trace FILE; -pprof=sched for where goroutines waited runnable)")
	conns := fs.String("conns", "32:64", "each host's connection manager watermarks LOW:HIGH (trims to LOW above HIGH), or off")
	connGraceFlag := fs.Duration("conn-grace", swarm.DefaultConnGrace, "how long, in the network's time, the connection managers leave a new connection untrimmed (unless given: "+swarm.RepelConnGrace.String()+" when the repel method runs)")
	ownPeerstores := fs.Bool("own-peerstores", false, "give every mocknet host go-libp2p's in-memory peerstore as it is, with its own copy of each peer's protocol list, metadata and addresses, instead of those kept once for the swarm (the same contents, a smaller heap)")
	memLimit := fs.String("memlimit", "", "a soft memory limit for the run (Go's runtime/debug.SetMemoryLimit, as GOMEMLIMIT): a size such as 900MiB or 4GiB, auto (2 MiB of RSS a peer: the runtime's limit less what RSS holds beyond the runtime's count, read every second), or off; the collector runs more often as the heap nears it, so RSS stays near it where --gogc alone lets the heap grow to (1+GOGC/100) times the live data (default: half the machine's memory, unless GOMEMLIMIT is set)")
	procs := fs.Int("gomaxprocs", 0, "the Go runtime's GOMAXPROCS for the run, unless the GOMAXPROCS variable is set (0: twice the machine's CPUs when --dilate is above 1, else the runtime's default): with twice as many Ps as CPUs the collector's mark has a worker of its own and the operating system shares the CPUs out, where with one P a CPU a large swarm's marks leave every goroutine waiting for seconds (experiments/README.md, \"What a 2 000-peer swarm's stalls are\")")
	gogc := fs.Int("gogc", 400, "the Go collector's GOGC for the run, unless the GOGC variable is set (0: leave it): a collector that runs often delays every in-process message and inflates the RTTs the peers measure")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address (e.g. localhost:6060) during the run")
	method := fs.String("method", "all", "selection methods to run one after another on the same peers, side by side: all (every registered method: "+strings.Join(methodNames(), ", ")+"), names separated by commas, or none (the DHT only)")
	force := fs.String("force", "attract", "repel: the force model, repulsion (Lo et al.'s) or attract (toward the clients a token serves)")
	viv := fs.Bool("vivaldi", true, "run Vivaldi on every peer and report coordinates and their error (repel needs it)")
	vivTidy := fs.Bool("vivaldi-tidy", false, "the Vivaldi services keep down the connections their sampling opens: they tag their near neighbours, sample random peers among the connected ones, and close what a probe or a one-off measurement opened (vivaldi.WithTidyConns); unless given, on when the repel method runs")
	vivInterval := fs.Duration("vivaldi-interval", 0, "how often each peer samples until the coordinates are good, in the network's time (0: 300ms, or n×1.25ms above 240 peers, so an undilated swarm takes at most 800 samples a second; a dilated warm-up may take the same samples a second of the clock with this divided by the dilation)")
	vivAfter := fs.Duration("vivaldi-after", swarm.VivaldiSlowInterval, "how often each peer samples once the coordinates are good (--vivaldi-bound), in the network's time; with the repel method's piggyback dissemination, how often news of the tokens travels")
	stallAfter := fs.Duration("stall", 0, "discard every Vivaldi sample timed across a stall of this process longer than this, in the network's time (a wake-up of a 1 ms watch that late: a collector's pause, or the CPU behind the swarm's goroutines; on mocknet the links' delays are the process's own timers, so a stall adds itself to every exchange in flight); repel clients and holders measure such an exchange again. 0: every sample is used (default 5ms when --dilate is above 1, else 0)")
	vivBound := fs.Float64("vivaldi-bound", 0.12, "wait for Vivaldi until the live median relative error is below this, or stops improving (unless given: 0.12, and 0.10 from 2 000 peers on — `peer experiment repel-coords`: at 490 peers the tokens place within 1.17× the k-median in coordinates of 0.12, at 2 000 they need 0.09–0.10)")
	superpeers := fs.Int("superpeers", 8, "S, the number of superpeers wanted")
	pow2 := fs.Bool("pow2", false, "prefix: Lo et al.'s 2^⌈log2 S⌉ groups instead of exactly S")
	startSpread := fs.Duration("start-spread", 0, "prefix: spread the peers' first lookups over this long (0: n × "+swarm.PrefixSpreadPerPeer.String()+", at least 1s; all start at once here, which no real network does)")
	fraction := fs.Float64("fraction", 0, "make S follow this fraction of the swarm, agreed by the peers (the census: superpeer.WithFraction, repel.Config.Fraction); --superpeers is then where they start and the capacity 2⌈1/fraction⌉ unless --capacity is given; with one --method, prefix (without --pow2) or repel (0: S fixed)")
	capacity := fs.Int("capacity", 0, "C, the most clients a superpeer serves (0: twice the mean load, 2⌈n/S⌉)")
	ttl := fs.Duration("ttl", 0, "attachment lifetime without renewal; renewed every third of it (0: "+swarm.TTLFor(1).String()+", or n × "+swarm.TTLPerPeer.String()+" above "+strconv.Itoa(swarm.TTLScaleAbove)+" peers, so that this process renews at most "+strconv.Itoa(int(math.Round(swarm.TTLScaleAbove*3/swarm.TTLFor(1).Seconds())))+" attachments a second)")
	displace := fs.Duration("displace", superpeer.DefaultDisplace, "repel: a full superpeer takes a client whose regret (its next choice's RTT minus this one's) exceeds a served client's by more than this in that client's place (0: first come, first served)")
	survey := fs.Duration("survey", swarm.RepelSwarmConfig(1, repel.Attract).SurveyInterval, "repel: a settled holder surveys its place this long after settling (then twice as long after each survey that keeps it): candidates among its clients measure the RTTs to its clients, and the token moves to one measured better (0: no surveys; the swarm converges once every place was kept)")
	kill := fs.Float64("kill", 0, "after convergence kill this fraction of the peers at random and measure recovery")
	explore := fs.Int("explore", 1, "repel: how many more holders, not yet measured, a client measures after an attach step, at most every five renewals, nearest by its coordinates first (0: none)")
	exploreFirst := fs.Int("explore-first", 0, "repel: a client explores at every attach step, not every five renewals, while it has measured fewer than this many holders (0: every five renewals from the start)")
	probe := fs.Int("probe", 3, "repel: how many holders a client measures (one Vivaldi exchange each, then every five renewals) before it chooses, nearest by its coordinates first")
	guard := fs.Bool("guard", false, "repel: guard the tokens: a token changes hands only by its live holder's signed hand-over, so a peer cannot take one by announcing a higher epoch; a token minted on both sides of a partition longer than T_dead then stays held on both until one holder leaves (every peer of one network should run the same)")
	inTransit := fs.Float64("in-transit", 0.01, "repel: during the rest, a reading still counts as converged with up to this fraction of the clients between holders (attached to one that does not list them yet, or unserved while a holder has room); they are scored as unserved. At 2 000 peers some client always is, and a rest that waited for none never came (0: none)")
	rest := fs.Float64("rest", 1.5, "repel: score the selection once it has been converged at every reading, with the same token holders, for this many renewal intervals (a third of --ttl each) of the network's time, so that clients placed by whoever had room in the moment have stepped on what they know (0: at its first convergence)")
	hold := fs.Duration("hold", 0, "repel: after the rest keep the swarm running this long (Vivaldi sampling every 2 s), then report the selection again once converged with as many clients in transit as the rest allows (before any --kill)")
	killSP := fs.Bool("kill-superpeers", false, "after convergence also kill every superpeer")
	dilate := fs.Float64("dilate", 1, "repel and Vivaldi: stretch time by this factor once the DHT has converged: link latencies and the protocols' timers this many times longer, measured RTTs divided by it, so that the machine's own delays shrink by it in what the peers measure (the run takes that much longer; every figure is in the network's time)")
	warmDilate := fs.Float64("warm-dilate", 0, "the dilation of the Vivaldi warm-up (0: as --dilate); the swarm then dilates to --dilate, the running coordinate services following (samples in flight across the change discarded), before the selection starts")
	gossipFlag := fs.String("gossip", "piggyback", "repel: how token announcements travel: piggyback (signed, on the Vivaldi exchanges; holders send theirs to each other directly) or gossipsub (a GossipSub mesh on every peer)")
	transportFlag := fs.String("transport", "mocknet", "what the hosts speak: mocknet (in-process links with the matrix's latencies), tcp or quic (real sockets on --listen: the kernel's latencies, the matrix only places the peers for the figures; --method prefix or none)")
	listenIP := fs.String("listen", "127.0.0.1", "tcp, quic: the IP address the hosts listen on, a port each")
	peersRange := fs.String("peers", "", "tcp, quic: FROM:TO, the peers of the n this process runs (default all); other processes with the same --n, --seed and --latency run the rest, one overlay, and `peer merge` joins their reports")
	joinFlag := fs.String("join", "", "tcp, quic: multiaddrs (/ip4/…/tcp/…/p2p/…, separated by commas) of peers of another swarm process for this one's first peer to join through")
	addrFile := fs.String("addr-file", "", "tcp, quic: once joined, write the first peer's multiaddrs here, one a line (what another process's --join takes)")
	linger := fs.Duration("linger", 0, "after the report keep the peers up this long, or until interrupted; with --peers, a range before the last only while peers of later ranges are connected (they may still be converging through these: start the ranges in order), and the report is the roles as they last were then (give the last range a few seconds, for the overlay to settle before every report)")
	webAddr := fs.String("web", "", "serve a live map of the swarm on this address (e.g. 127.0.0.1:8080), with buttons to kill a superpeer or a fraction of the peers; the swarm then runs on after its report until interrupted")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	dissemination, err := repel.ParseDissemination(*gossipFlag)
	if err != nil {
		return fmt.Errorf("%w: --gossip: %v", errUsage, err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	connLow, connHigh, err := parseConns(*conns)
	if err != nil {
		return err
	}
	if *connGraceFlag <= 0 {
		return fmt.Errorf("%w: --conn-grace %v: want a positive duration", errUsage, *connGraceFlag)
	}
	if *gogc < 0 {
		return fmt.Errorf("%w: --gogc %d is negative", errUsage, *gogc)
	}
	limit, err := parseMemLimit(*memLimit, *n)
	if err != nil {
		return err
	}
	holdRSS := *memLimit == "auto"
	var rssTarget int64
	if *gogc > 0 && os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(*gogc))
	}
	if *procs < 0 {
		return fmt.Errorf("%w: --gomaxprocs %d is negative", errUsage, *procs)
	}
	if p := procsFor(*procs, *dilate, runtime.NumCPU()); p > 0 && os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
	}
	if limit < 0 && os.Getenv("GOMEMLIMIT") == "" {
		// A lazy collector lets garbage grow to GOGC/100 times the live
		// heap; a soft limit at half the machine's memory makes it work
		// harder before that crowds out the rest of the machine.
		if total := memTotal(); total > 0 {
			limit = int64(total / 2)
		}
	}
	switch {
	case holdRSS:
		// auto means 2 MiB of RSS a peer: the runtime's limit is steered
		// to leave room for what RSS holds beyond its count (the binary).
		defer memlimit.Hold(uint64(limit), time.Second).Stop()
		rssTarget = limit
	case limit > 0:
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	}
	if *pprofAddr != "" {
		if err := servePprof(*pprofAddr, stderr); err != nil {
			return err
		}
	}
	if *n < 2 {
		return fmt.Errorf("%w: --n %d: need at least 2 peers", errUsage, *n)
	}
	methods, err := parseMethods(*method)
	if err != nil {
		return err
	}
	coords, repelRuns := false, false
	for _, m := range methods {
		coords = coords || m.Coordinates
		repelRuns = repelRuns || m.Name == "repel"
	}
	repelConnDefaults(fs, repelRuns, connGraceFlag, vivTidy)
	if *lookups < 0 || *rounds < 0 || *timeout <= 0 {
		return fmt.Errorf("%w: --lookups, --max-rounds and --timeout must not be negative", errUsage)
	}
	switch {
	case *force != "attract" && *force != "repulsion":
		return fmt.Errorf("%w: --force %q: want repulsion or attract", errUsage, *force)
	case coords && !*viv:
		return fmt.Errorf("%w: --method %s needs --vivaldi (it places superpeers by coordinates)", errUsage, *method)
	case *stallAfter < 0:
		return fmt.Errorf("%w: --stall %v is negative", errUsage, *stallAfter)
	case *stallTrace != "" && (!*viv || (flagSet(fs, "stall") && *stallAfter == 0) || (!flagSet(fs, "stall") && swarm.StallFor(*dilate) == 0)):
		return fmt.Errorf("%w: --stall-trace needs the stall watch (--vivaldi, and --stall above 0 or --dilate above 1)", errUsage)
	case *vivInterval < 0:
		return fmt.Errorf("%w: --vivaldi-interval %v is negative", errUsage, *vivInterval)
	case *vivAfter < 0:
		return fmt.Errorf("%w: --vivaldi-after %v is negative", errUsage, *vivAfter)
	case !(*vivBound >= 0):
		return fmt.Errorf("%w: --vivaldi-bound %v is negative", errUsage, *vivBound)
	case *superpeers < 1 || *superpeers >= *n:
		return fmt.Errorf("%w: --superpeers %d must be in [1, n)", errUsage, *superpeers)
	case *capacity < 0:
		return fmt.Errorf("%w: --capacity %d is negative", errUsage, *capacity)
	case math.IsNaN(*fraction) || *fraction < 0 || *fraction > 1:
		return fmt.Errorf("%w: --fraction %v not in (0, 1] (0: S fixed)", errUsage, *fraction)
	case *fraction > 0 && (len(methods) != 1 || methods[0].Name != "prefix" && methods[0].Name != "repel" || *pow2):
		return fmt.Errorf("%w: --fraction needs one --method, prefix (without --pow2) or repel", errUsage)
	case *displace < 0:
		return fmt.Errorf("%w: --displace %v is negative", errUsage, *displace)
	case *survey < 0:
		return fmt.Errorf("%w: --survey %v is negative", errUsage, *survey)
	case *ttl != 0 && *ttl < 100*time.Millisecond:
		return fmt.Errorf("%w: --ttl %v is below 100ms", errUsage, *ttl)
	case *parallel < 1:
		return fmt.Errorf("%w: --parallel %d must be at least 1", errUsage, *parallel)
	case *kill < 0 || *kill >= 1 || *kill != *kill:
		return fmt.Errorf("%w: --kill %v must be in [0, 1)", errUsage, *kill)
	case *probe < 1:
		return fmt.Errorf("%w: --probe %d must be at least 1", errUsage, *probe)
	case *explore < 0:
		return fmt.Errorf("%w: --explore %d must be at least 0", errUsage, *explore)
	case *exploreFirst < 0:
		return fmt.Errorf("%w: --explore-first %d must be at least 0", errUsage, *exploreFirst)
	case !(*rest >= 0) || math.IsInf(*rest, 0):
		return fmt.Errorf("%w: --rest %v must be a number of renewals ≥ 0", errUsage, *rest)
	case !(*inTransit >= 0 && *inTransit < 1):
		return fmt.Errorf("%w: --in-transit %v must be a fraction in [0, 1)", errUsage, *inTransit)
	case *hold < 0:
		return fmt.Errorf("%w: --hold %v is negative", errUsage, *hold)
	case !(*dilate >= 1) || *dilate > 1000:
		return fmt.Errorf("%w: --dilate %v must be in [1, 1000]", errUsage, *dilate)
	case *warmDilate != 0 && (!(*warmDilate >= 1) || *warmDilate > 1000):
		return fmt.Errorf("%w: --warm-dilate %v must be 0 or in [1, 1000]", errUsage, *warmDilate)
	case *dilate != 1 && len(methods) > 0 && (len(methods) > 1 || methods[0].Name != "repel"):
		return fmt.Errorf("%w: --dilate is for --method repel or none (the other selectors' timers do not follow it)", errUsage)
	case *hold > 0 && (len(methods) != 1 || methods[0].Name != "repel"):
		return fmt.Errorf("%w: --hold is for --method repel", errUsage)
	case (*kill > 0 || *killSP) && len(methods) != 1:
		return fmt.Errorf("%w: --kill and --kill-superpeers need one --method (a kill is for good: the next method would start on fewer peers)", errUsage)
	}
	where, err := parseWhere(*transportFlag, *listenIP, *peersRange, *joinFlag, *n)
	if err != nil {
		return err
	}
	if where.transport.Real() {
		// Real sockets carry the kernel's latencies, not the matrix's: a
		// method that places by measured RTTs would place by loopback's.
		if !flagSet(fs, "method") {
			methods, _ = parseMethods("prefix")
		}
		if !flagSet(fs, "vivaldi") {
			*viv = false
		}
		switch {
		case len(methods) > 1 || len(methods) == 1 && methods[0].Name != "prefix":
			return fmt.Errorf("%w: --transport %s runs --method prefix or none (the kernel's loopback latencies are not the matrix's: use mocknet, or peer testbed, for a method that measures)", errUsage, where.transport)
		case *viv:
			return fmt.Errorf("%w: --transport %s: --vivaldi would embed loopback's RTTs, not the matrix's", errUsage, where.transport)
		case *dilate != 1 || *warmDilate > 1:
			return fmt.Errorf("%w: --dilate and --warm-dilate need --transport mocknet (the kernel's links do not stretch)", errUsage)
		}
		repelRuns = false
		// Two descriptors a connection held in this process, up to the
		// high watermark's connections a peer, and room to spare.
		want := uint64(where.to-where.from) * uint64(max(connHigh, 64)) * 3
		if got := raiseFileLimit(want); got < want {
			fmt.Fprintf(stderr, "warning: open files limited to %d (want %d for %d peers on real sockets): connections may fail\n", got, want, where.to-where.from)
		}
	}
	if where.ranged() {
		switch {
		case *kill > 0 || *killSP || *hold > 0 || *fraction > 0 || *webAddr != "":
			return fmt.Errorf("%w: --peers and --join run one range of the overlay: --kill, --kill-superpeers, --hold, --fraction and --web need the whole swarm in one process", errUsage)
		}
	}
	capacityGiven := flagSet(fs, "capacity")
	pl, latName, err := placePeers(*lat, *n, *superpeers, capacity, seed, stdout)
	if err != nil {
		return err
	}
	ctx, cancel, release := webRunContext(*timeout, *webAddr != "")
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()

	bar := newProgress(stderr)
	var nodeOpts []dht.Option
	var gossip *swarm.GossipCounter
	if repelRuns && dissemination == repel.GossipSub {
		nodeOpts, gossip = swarm.RepelNodeOptions()
	}
	var web *swarmWeb // --web: the live map
	progress := func(stage string, done, total int) {
		bar.update(stage, done, total)
		web.View().Progress(stage, done, total)
	}
	connGrace, connSilence := swarm.DilatedConnPeriods(*connGraceFlag, *dilate)
	s, err := swarm.New(ctx, swarm.Config{N: *n, Seed: *seed, RTT: pl, HostOf: pl.Host, Parallel: *parallel, Progress: progress, Log: bar.log, NodeOptions: nodeOpts, ConnLow: connLow, ConnHigh: connHigh,
		ConnGrace: connGrace, ConnSilence: connSilence, Serve: served(*viv, methods),
		Transport: where.transport, ListenIP: where.ip, From: where.from, To: where.to, Bootstrap: where.join, OwnPeerstores: *ownPeerstores})
	if err != nil {
		return err
	}
	defer s.Close()
	if *webAddr != "" {
		if web, err = startSwarmWeb(*webAddr, s, stderr); err != nil {
			return err
		}
		defer web.Close()
	}
	if err := s.Join(ctx); err != nil {
		return err
	}
	here, err := announceRange(s, where, *lat, *addrFile, stderr)
	if err != nil {
		return err
	}
	if err := s.WaitConverged(ctx, *rounds); err != nil {
		return err
	}
	rep := swarmReport{
		N: *n, Seed: *seed, Latency: latName, Transport: string(where.transport), Args: args, Range: here,
		GCPercent:          gcPercent(),
		GoMaxProcs:         runtime.GOMAXPROCS(0),
		MemLimit:           debug.SetMemoryLimit(-1),
		RSSTarget:          rssTarget,
		OwnPeerstores:      *ownPeerstores,
		BuildSeconds:       s.BuildTime.Seconds(),
		JoinRetries:        s.JoinRetries.Load(),
		JoinLookupFailures: s.JoinLookupFailures.Load(),
		ConvergeSeconds:    s.ConvergeTime.Seconds(),
		ConvergeMisses:     s.ConvergeMisses,
		Links:              s.Links(),
	}
	// The lookup checks, both kinds at once; each draws its jobs from its
	// own source, so the keys and origins are the seed's whatever the
	// order.
	checkLookups := func() {
		var wg sync.WaitGroup
		for i, raw := range []bool{false, true} {
			wg.Add(1)
			go func(rng *rand.Rand) {
				defer wg.Done()
				c := s.CheckLookups(ctx, *lookups, raw, rng)
				if raw {
					rep.RawLookup = c
				} else {
					rep.Lookup = c
				}
			}(rand.New(rand.NewSource(*seed + 2 + int64(8*i))))
		}
		wg.Wait()
	}
	warm := *warmDilate
	if warm == 0 {
		warm = *dilate
	}
	if warm != 1 {
		// Before the links stretch: kad-dht's timeouts do not follow the
		// dilation, so a lookup over links F times slower can time out and
		// the check would count the dilation, not the DHT.
		checkLookups()
		if err := s.Dilate(warm); err != nil {
			return err
		}
		bar.log(fmt.Sprintf("time dilated ×%g from here: links and timers %g times slower, figures in the network's time", warm, warm))
	}
	if warm != *dilate {
		rep.WarmDilation = warm
	}
	if *ttl == 0 {
		*ttl = swarm.TTLFor(*n)
	}
	rep.TTLSeconds = ttl.Seconds()
	var vr *swarm.VivaldiRun
	if *viv {
		if *vivInterval == 0 {
			// In the network's time: a dilated warm-up takes F times
			// longer on the clock. Why not the clock's rate by default:
			// experiments/README.md, "… on better coordinates".
			*vivInterval = swarm.VivaldiWarmInterval(*n)
		}
		if !flagSet(fs, "stall") {
			*stallAfter = swarm.StallFor(*dilate)
		}
		rep.StallMs = float64(*stallAfter) / float64(time.Millisecond)
		if vr, err = s.StartVivaldi(swarm.VivaldiOptions{Interval: *vivInterval, Stall: *stallAfter, Tidy: *vivTidy}); err != nil {
			return err
		}
		defer vr.Close()
		if *stallTrace != "" {
			stop, err := traceStall(vr, *stallTrace, stderr)
			if err != nil {
				return err
			}
			defer stop()
		}
		web.View().SetVivaldi(vr)
	}
	if warm == 1 {
		// The lookup checks run while the coordinates warm up.
		checkLookups()
	}
	if vr != nil {
		// Good enough: sample slowly from then on, leaving the machine to
		// the selection.
		if !flagSet(fs, "vivaldi-bound") {
			*vivBound = swarm.VivaldiBoundFor(*n)
		}
		vs, err := vr.WarmUp(ctx, *vivBound, *vivAfter)
		if err != nil {
			return err
		}
		rep.Vivaldi = &vs
	}
	if *dilate != warm {
		if err := s.Dilate(*dilate); err != nil {
			return err
		}
		bar.log(fmt.Sprintf("time dilated ×%g from here (the warm-up ran at ×%g): links and timers %g times slower, figures in the network's time", *dilate, warm, *dilate))
	}
	rep.Dilation = s.Dilation()
	f := methodFlags{superpeers: *superpeers, capacity: *capacity, probe: *probe, explore: *explore, exploreFirst: *exploreFirst, pow2: *pow2, startSpread: *startSpread, killSP: *killSP, fraction: *fraction, capacityGiven: capacityGiven,
		ttl: *ttl, displace: *displace, survey: *survey, hold: *hold, rest: *rest, inTransit: *inTransit, force: *force, kill: *kill, dissemination: dissemination, guard: *guard, seed: *seed}
	f.view = web.View()
	// The last method runs on through the report and is closed after the
	// swarm's network is cut (swarm.Cut), with the coordinates: the run is
	// over, and closing protocols on connected hosts would have identify
	// tell every connected peer of each removed one. --web keeps them
	// itself.
	var last []func()
	defer func() {
		s.Cut()
		for _, stop := range last {
			stop()
		}
	}()
	for k, m := range methods {
		f.keep = web.keeper(k == len(methods)-1)
		if f.keep == nil && k == len(methods)-1 {
			f.keep = func(stop func()) { last = append(last, stop) }
		}
		bar.log(fmt.Sprintf("method %s", m.Name))
		run := runMethod
		if where.ranged() {
			run = runRangeMethod(here)
		}
		mr, err := run(ctx, s, vr, gossip, m, f)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		rep.Methods = append(rep.Methods, mr)
	}
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.Name
	}
	rep.Method = strings.Join(names, ",")
	if len(methods) == 0 {
		rep.Method = "none"
	}
	if len(rep.Methods) == 1 {
		m := rep.Methods[0]
		rep.Superpeers, rep.Kill, rep.Rest, rep.Hold, rep.VivaldiAfter, rep.Repel = m.Superpeers, m.Kill, m.Rest, m.Hold, m.VivaldiAfter, m.Repel
	}
	bar.done()
	rep.RSSBytes, rep.Goroutines = swarm.RSS(), swarm.Goroutines()
	rep.ConnsMean, rep.ConnsMax = s.Connections()
	fillPeers(&rep, s, vr)
	rep.StuckIdentifies = s.StuckIdentifies()
	ran := len(s.Local())
	if where.transport.Real() {
		fmt.Fprintf(stdout, "peers            %d of %d (%d–%d) over %s, on %s sockets at %s\n", ran, rep.N, where.from, where.to-1, rep.Latency, where.transport, where.ip)
	} else {
		fmt.Fprintf(stdout, "peers            %d over %s (mocknet, %d links, %d closed for a stuck identify)\n", rep.N, rep.Latency, rep.Links, rep.StuckIdentifies)
	}
	fmt.Fprintf(stdout, "build + join     %.1f s (%d joins tried again, %d left to convergence)\n", rep.BuildSeconds, rep.JoinRetries, rep.JoinLookupFailures)
	fmt.Fprintf(stdout, "converge         %.1f s (%d check lookups missed and mended)\n", rep.ConvergeSeconds, rep.ConvergeMisses)
	fmt.Fprintf(stdout, "memory           %.1f MiB RSS, %.2f MiB per peer\n", mib(rep.RSSBytes), mib(rep.RSSBytes)/float64(ran))
	fmt.Fprintf(stdout, "goroutines       %d, %.1f per peer\n", rep.Goroutines, float64(rep.Goroutines)/float64(ran))
	fmt.Fprintf(stdout, "connections      mean %.1f, max %d per peer (watermarks %s)\n", rep.ConnsMean, rep.ConnsMax, *conns)
	fmt.Fprintf(stdout, "kad requests     %d, %.0f per peer\n", s.KadMessages(), float64(s.KadMessages())/float64(ran))
	fmt.Fprintf(stdout, "kad lookups      %d of %d exact\n", rep.Lookup.Exact, rep.Lookup.Tried)
	fmt.Fprintf(stdout, "raw-key lookups  %d of %d exact\n", rep.RawLookup.Exact, rep.RawLookup.Tried)
	if rep.Vivaldi != nil {
		fmt.Fprintf(stdout, "vivaldi          median %.3f  p90 %.3f relative error after %.1f s (%.0f samples per peer, %s); samples %.1f / %.1f ms over the true RTT (median / p90)\n",
			rep.Vivaldi.Median, rep.Vivaldi.P90, rep.Vivaldi.Seconds, rep.Vivaldi.Samples, rep.Vivaldi.Stopped, rep.Vivaldi.RTTExcessMs[0], rep.Vivaldi.RTTExcessMs[1])
		printStalls(stdout, rep.Vivaldi.Stalls)
	}
	for _, mr := range rep.Methods {
		printMethod(stdout, mr)
	}
	if r := rep.Range; r != nil && r.Superpeers > 0 {
		fmt.Fprintf(stdout, "range            peers %d–%d converged in %.1f s as far as this process can tell: %d wrong, %d unserved\n", r.From, r.To-1, r.SelectSeconds, r.Wrong, r.Unserved)
	}
	if len(rep.Methods) > 1 {
		printMethods(stdout, rep.Methods)
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report           %s\n", *jsonOut)
	}
	if web != nil {
		release()
		web.serve(stderr)
		web.Close()
	}
	ranged := here != nil && where.ranged() && len(rep.Methods) == 1
	var snap func()
	if ranged {
		// The processes of later ranges converged after this one,
		// through these peers: the roles are read again every second
		// while they are up, and the last reading is the report's, so
		// that `peer merge` joins states of about one moment.
		snap = func() { rangeSnapshot(s, here, rep.Methods[0]) }
	}
	if *linger > 0 {
		lingerFor(ctx, s, *linger, here != nil && where.ranged(), where.to == where.n, snap, stderr)
	}
	if ranged {
		s.StopMethod()
		rep.Peers = nil
		fillPeers(&rep, s, vr)
		if *jsonOut != "" {
			if err := writeJSON(*jsonOut, rep); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "report again     %s (the roles as the later processes left: %d wrong, %d unserved)\n", *jsonOut, here.Wrong, here.Unserved)
		}
	}
	return nil
}

// lingerFor keeps the swarm up for d after its report, or until
// interrupted; a range of an overlay only while peers of the processes of
// later ranges are connected (they may still be converging through its
// peers), reading its roles (snap) every second meanwhile, so that the
// processes of an overlay started in the order of their ranges end from
// the last one back; the last range (last) lingers the whole d, leaving
// the overlay that long to settle before every process's final reading.
func lingerFor(ctx context.Context, s *swarm.Swarm, d time.Duration, ranged, last bool, snap func(), stderr io.Writer) {
	switch {
	case ranged && last:
		fmt.Fprintf(stderr, "peers up for %v more (--linger; the last range: the others end after it), or until interrupted\n", d)
	case ranged:
		fmt.Fprintf(stderr, "peers up for up to %v more (--linger) while peers of later ranges are connected, or until interrupted\n", d)
	default:
		fmt.Fprintf(stderr, "peers up for %v more (--linger), or until interrupted\n", d)
	}
	end := time.After(d)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end:
			return
		case <-tick.C:
			if !ranged {
				continue
			}
			if !last && !s.ConnectedBeyond() {
				fmt.Fprintln(stderr, "no peer of a later range connected: done")
				return
			}
			if snap != nil {
				snap()
			}
		}
	}
}

// served is the swarm's Config.Serve for a run: the protocols its
// coordinate services and methods will register, listed on every host
// before it connects, so that starting them pushes no identify update to
// every connected peer.
func served(viv bool, methods []superpeer.Method) func(protocol.ID) []protocol.ID {
	var adds []func(*rcmgr.ScalingLimitConfig, protocol.ID)
	if viv {
		adds = append(adds, vivaldi.AddLimits)
	}
	for _, m := range methods {
		add := superpeer.AddLimits
		if m.Name == "repel" {
			add = repel.AddLimits
		}
		adds = append(adds, add)
	}
	all, coords := swarm.ProtocolsOf(adds...), swarm.ProtocolsOf(vivaldi.AddLimits)
	return func(prefix protocol.ID) []protocol.ID {
		out := all(prefix)
		if !viv {
			// superpeer.AddLimits lists the coordinate exchange beneath
			// the attach protocol; without --vivaldi nothing serves it.
			skip := coords(prefix)
			out = slices.DeleteFunc(out, func(p protocol.ID) bool { return slices.Contains(skip, p) })
		}
		return out
	}
}

// fillPeers adds every peer this process runs to the report: ID, key, host,
// and with one method its role and superpeer, with Vivaldi its coordinate.
func fillPeers(rep *swarmReport, s *swarm.Swarm, vr *swarm.VivaldiRun) {
	live := map[int]bool{}
	for _, i := range s.Live() {
		live[i] = true
	}
	for _, p := range s.Local() {
		pr := peerReport{Index: p.Index, ID: p.ID.String(), Key: p.Key.Hex(), Host: s.HostOf(p.Index), Dead: !live[p.Index]}
		if len(rep.Methods) == 1 {
			switch j := rep.Methods[0].SuperpeerOf[p.Index]; {
			case pr.Dead:
				pr.Role = "dead"
			case j == p.Index:
				pr.Role, pr.Superpeer = superpeer.Superpeer.String(), pr.ID
			case j >= 0:
				pr.Role, pr.Superpeer = superpeer.Client.String(), s.Peers[j].ID.String()
			default:
				pr.Role = superpeer.Client.String()
			}
		}
		if vr != nil && live[p.Index] {
			if c := vr.Coord(p.Index); len(c.Vec) > 0 {
				pr.Coord = &coordReport{Vec: c.Vec, Height: c.Height, Error: c.Error}
			}
		}
		rep.Peers = append(rep.Peers, pr)
	}
}

// printMethod prints one method's run.
func printMethod(w io.Writer, mr *methodReport) {
	fmt.Fprintln(w)
	if mr.Superpeers == nil {
		// A range of an overlay: its figures are `peer merge`'s.
		fmt.Fprintf(w, "  selection        %s on this range's peers; the overlay's figures: peer merge REPORT.json…\n", mr.Method)
		return
	}
	printSelection(w, "selection", mr.Superpeers)
	if r := mr.Rest; r != nil && r.Renewals > 0 {
		fmt.Fprintf(w, "  at rest          from %.1f s, scored after %.1f s more converged with the same token holders (%g renewals; %d clients moved meanwhile; in transit at most %d of %d allowed, %d at the end); first converged at %.1f s\n",
			mr.Superpeers.ConvergeSeconds, r.RestSeconds, r.Renewals, r.ClientsMoved, r.InTransitMax, r.InTransitAllowed, r.InTransitEnd, r.FirstConvergedSeconds)
	}
	if c := mr.Connections; c != nil {
		fmt.Fprintf(w, "  connections      mean %.1f a peer (%.1f protected, %.1f young), max %d (peer %d: %d young, %d opened by the other side), unprotected max %d, once converged\n", c.Mean, c.ProtectedMean, c.YoungMean, c.Max, c.MaxPeer, c.MaxPeerYoung, c.MaxPeerInbound, c.UnprotectedMax)
	}
	if len(mr.Dials) > 0 {
		fmt.Fprintf(w, "  dials            %s until converged (peers not connected, by the protocol that asked)\n", dialsLine(mr.Dials))
	}
	if p := mr.VivaldiPicks; p != nil {
		fmt.Fprintf(w, "  vivaldi picks    near %d, probes %d, random %d; dials near %d, probes %d, random %d, the method's %d; probes' connections closed %d, kept %d wanted, %d busy (until converged)\n",
			p.Near, p.Probes, p.Random, p.NearDials, p.ProbeDials, p.RandomDials, p.CallerDials, p.Closed, p.KeptWanted, p.KeptBusy)
	}
	if a := mr.VivaldiAfter; a != nil {
		fmt.Fprintf(w, "  vivaldi          median %.3f  p90 %.3f once selection converged; samples %.1f / %.1f ms over the true RTT\n", a.Median, a.P90, a.RTTExcessMs[0], a.RTTExcessMs[1])
		printStalls(w, a.Stalls)
		if a.RTTExcessMs[0] > slowMachineExcessMs {
			fmt.Fprintf(w, "warning          the machine is not keeping up: samples measured %.0f ms over the true RTT (median); coordinates and client RTTs are distorted (a larger --dilate, fewer peers, or a larger --gogc)\n", a.RTTExcessMs[0])
		}
	}
	if mr.Repel != nil {
		printRepel(w, mr.Repel, mr.Superpeers)
	}
	if h := mr.Hold; h != nil {
		fmt.Fprintf(w, "held             %.0f s more (converged again %.1f s later); Vivaldi median %.3f p90 %.3f, samples %.1f / %.1f ms over the true RTT\n",
			h.HeldSeconds, h.WaitedSeconds, h.VivaldiAfter.Median, h.VivaldiAfter.P90, h.VivaldiAfter.RTTExcessMs[0], h.VivaldiAfter.RTTExcessMs[1])
		printStalls(w, h.VivaldiAfter.Stalls)
		printSelection(w, "after the hold", h.After)
		printRepel(w, h.RepelAfter, h.After)
	}
	if k := mr.Kill; k != nil {
		fmt.Fprintf(w, "killed           %d peers (%d superpeers); recovered in %.1f s\n", k.Killed, k.KilledSuper, k.RecoverSeconds)
		if k.RepelAfter != nil {
			fmt.Fprintf(w, "  tokens back     %.1f s (bound T_dead + T_settle = %.1f s)\n", k.TokensBackSeconds, k.BoundSeconds)
		}
		printSelection(w, "after the kill", k.After)
		if k.RepelAfter != nil {
			printRepel(w, k.RepelAfter, k.After)
		}
	}
}

func printSelection(w io.Writer, title string, sum *swarm.SelectionSummary) {
	if sum.Bits > 0 {
		fmt.Fprintf(w, "%s (%s, S = %d in %d groups of up to %d bits, capacity %d):\n", title, sum.Method, sum.Target, sum.Groups, sum.Bits, sum.Capacity)
		fmt.Fprintf(w, "  superpeers       %d (expected %.2f; book 2^(k-m)·N = %.3g)\n", sum.Count, sum.Expected, sum.Book)
	} else {
		fmt.Fprintf(w, "%s (%s, S = %d, capacity %d):\n", title, sum.Method, sum.Target, sum.Capacity)
		fmt.Fprintf(w, "  superpeers       %d\n", sum.Count)
	}
	fmt.Fprintf(w, "  converged in     %.1f s\n", sum.ConvergeSeconds)
	fmt.Fprintf(w, "  clients/superpeer max %d, mean %.1f, Gini %.3f; unserved %d\n", sum.ClientsPerSuperpeer.Max, sum.ClientsPerSuperpeer.Mean, sum.ClientsPerSuperpeer.Gini, sum.Unserved)
	fmt.Fprintf(w, "  client RTT ms    mean %.1f  p50 %.1f  p90 %.1f   (S random superpeers: mean %.1f  p50 %.1f  p90 %.1f)\n",
		sum.ClientRTT.Mean, sum.ClientRTT.P50, sum.ClientRTT.P90, sum.RandomClientRTT.Mean, sum.RandomClientRTT.P50, sum.RandomClientRTT.P90)
	fmt.Fprintf(w, "  k-median RTT ms  mean %.1f  p50 %.1f  p90 %.1f (centralised, true RTTs)\n", sum.KMedianClientRTT.Mean, sum.KMedianClientRTT.P50, sum.KMedianClientRTT.P90)
	fmt.Fprintf(w, "  placement RTT ms mean %.1f  p50 %.1f  p90 %.1f (these superpeers, clients attached as the k-median's)\n", sum.PlacementClientRTT.Mean, sum.PlacementClientRTT.P50, sum.PlacementClientRTT.P90)
	if sw := sum.OneSwap; sw != nil {
		if sw.Out < 0 {
			fmt.Fprintf(w, "  one swap         none lowers these superpeers' mean RTT to the nearest (%.1f ms, no capacity): a local optimum of the k-medoids' swap search\n", sw.BeforeMs)
		} else {
			fmt.Fprintf(w, "  one swap         superpeer %d for peer %d takes the mean RTT to the nearest from %.1f to %.1f ms (no capacity; the k-medoids' swap step)\n", sw.Out, sw.In, sw.BeforeMs, sw.AfterMs)
		}
	}
	fmt.Fprintf(w, "  per peer per s   kad %.2f  closest %.2f  attach %.2f msgs, %.1f attach bytes\n",
		sum.PerPeerPerSecond["kad_requests"], sum.PerPeerPerSecond["closest_requests"], sum.PerPeerPerSecond["attach_requests"], sum.PerPeerPerSecond["attach_bytes"])
}

func printRepel(w io.Writer, rs *swarm.RepelSummary, sum *swarm.SelectionSummary) {
	fmt.Fprintf(w, "  tokens (%s)  settled in %.1f s; %d moves, %d mints (%d lookups, %d failed; %d requests, %d failed, %d called off), %d fenced; surveys %d (%d moved, %d to a region, %d kept); %d clients' coordinates misfit their holder's RTT; attach: %d refused full, %d displaced (%d told at once)\n",
		rs.Force, rs.SettleSeconds, rs.Moves, rs.Minted, rs.Lookups, rs.LookupFailures, rs.LookupRequests, rs.LookupRequestFailures, rs.LookupRequestsCalledOff, rs.Fenced, rs.Surveys, rs.SurveyMoves, rs.RegionMoves, rs.SurveyKept, rs.CoordMisfits, rs.RefusedFull, rs.Displaced, rs.Told)
	if rs.Proposals > 0 || rs.Retired > 0 {
		fmt.Fprintf(w, "  count            proposals of a new count %d, tokens retired %d\n", rs.Proposals, rs.Retired)
	}
	if rs.Guard {
		fmt.Fprintf(w, "  guard            untraced versions refused %d, went back to a live holder %d\n", rs.Untraced, rs.Reverted)
	}
	pp := sum.PerPeerPerSecond
	if l := rs.LagSeconds; l != nil {
		fmt.Fprintf(w, "  news of tokens   behind the holder p50 %.2f s  p90 %.2f s  p99 %.2f s (%s, %d readings)\n", l.P50, l.P90, l.P99, rs.Dissemination, l.Readings)
	}
	fmt.Fprintf(w, "  per peer per s   %s %.2f msgs %.0f bytes (announce %.3f sent); moves %.3f frames; surveys %.3f frames %.0f bytes; holder probes %.2f; clients' explorations %.2f; vivaldi %.2f samples\n",
		rs.Dissemination, pp["gossip_messages"], pp["gossip_bytes"], pp["announce_sent"], pp["move_frames"], pp["survey_frames"], pp["survey_bytes"], pp["holder_probes"], pp["client_explored"], pp["vivaldi_samples"])
	if len(rs.Drops) > 0 {
		fmt.Fprintf(w, "  refused          %v\n", rs.Drops)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress prints stage progress to a terminal with \r, or a line every few
// seconds otherwise.
type progress struct {
	mu    sync.Mutex // join reports from many goroutines
	w     io.Writer
	tty   bool
	stage string
	seen  int // the count last reported
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, tty: tty, start: time.Now()}
}

func (p *progress) update(stage string, done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	newStage := stage != p.stage
	// A stage's completion prints at once, the first time it is reached;
	// a stage that stays complete (repel's clients all attached while the
	// tokens are surveyed) prints no more often than any other.
	completes := done == total && (newStage || p.seen != total)
	p.seen = done
	if !newStage && !completes && now.Sub(p.last) < p.interval() {
		return
	}
	if newStage && p.stage != "" && p.tty {
		fmt.Fprintln(p.w)
	}
	p.stage, p.last = stage, now
	msg := fmt.Sprintf("%-9s %6d/%-6d %5.1f%%  %6.1fs", stage, done, total, 100*float64(done)/float64(max(total, 1)), now.Sub(p.start).Seconds())
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
}

// log writes a line of its own between progress lines.
func (p *progress) log(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) interval() time.Duration {
	if p.tty {
		return 100 * time.Millisecond
	}
	return 5 * time.Second
}

func (p *progress) done() {
	if p.tty && p.stage != "" {
		fmt.Fprintln(p.w)
	}
}

// parseMemLimit reads --memlimit for n peers: bytes, 0 for off, -1 for
// the default.
func parseMemLimit(v string, n int) (int64, error) {
	bad := func() (int64, error) {
		return 0, fmt.Errorf("%w: --memlimit %q: want off, auto, or a size such as 900MiB or 4GiB", errUsage, v)
	}
	switch v {
	case "":
		return -1, nil
	case "off":
		return 0, nil
	case "auto":
		return int64(max(n, 1)) << 21, nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			x, err := strconv.ParseInt(num, 10, 64)
			if err != nil || x <= 0 || x > math.MaxInt64>>u.shift {
				return bad()
			}
			return x << u.shift, nil
		}
	}
	return bad()
}

// dialsLine lists dials by protocol, most first.
func dialsLine(d map[string]uint64) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(d[b], d[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, d[k])
	}
	return strings.Join(parts, ", ")
}

// parseConns reads --conns: LOW:HIGH watermarks, or off (-1: no trimming).
func parseConns(v string) (low, high int, err error) {
	if v == "off" {
		return 0, -1, nil
	}
	a, b, ok := strings.Cut(v, ":")
	if ok {
		low, err = strconv.Atoi(a)
		if err == nil {
			high, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || low < 0 || high < 1 || low > high {
		return 0, 0, fmt.Errorf("%w: --conns %q: want LOW:HIGH with 0 <= LOW <= HIGH, HIGH >= 1, or off", errUsage, v)
	}
	return low, high, nil
}

// vivaldiError is the live coordinates' relative error over all pairs.
type vivaldiError struct {
	Median      float64    `json:"median"`
	P90         float64    `json:"p90"`
	RTTExcessMs [2]float64 `json:"rtt_excess_ms"`
	// Stalls is what --stall discarded so far (nil: off).
	Stalls *swarm.Stalls `json:"stalls,omitempty"`
}

// vivaldiErrorOf is the live coordinates' error and the latest samples'
// excess now.
func vivaldiErrorOf(vr *swarm.VivaldiRun) *vivaldiError {
	med, p90 := vr.Error()
	e := &vivaldiError{Median: med, P90: p90}
	e.RTTExcessMs[0], e.RTTExcessMs[1], _ = vr.RTTExcess()
	e.Stalls = vr.Stalls()
	return e
}

// procsFor is the GOMAXPROCS --gomaxprocs asks for (0: leave the
// runtime's): the flag when given, else twice the CPUs for a dilated run.
// A dilated run is for figures of the network; with one P a CPU, a
// 2 000-peer swarm's collector marks with its fractional worker and the
// assists of every allocating goroutine, and for seconds nothing else
// runs; with two, the mark has a dedicated worker and the operating
// system shares the CPUs among them (experiments/README.md, "What a 2
// 000-peer swarm's stalls are").
func procsFor(flag int, dilate float64, cpus int) int {
	switch {
	case flag > 0:
		return flag
	case dilate > 1:
		return 2 * cpus
	}
	return 0
}

// gcPercent is the collector's GOGC now (-1: off).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// slowMachineExcessMs is the median sample excess over the true RTT above
// which a swarm report warns that its timing is not to be trusted: in-process
// overhead is about a millisecond.
const slowMachineExcessMs = 5

// memTotal is the machine's memory in bytes, from /proc/meminfo (0 where
// that cannot be read).
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return parseMemTotal(string(b))
}

// parseMemTotal reads the MemTotal line of /proc/meminfo ("MemTotal: N kB").
func parseMemTotal(meminfo string) uint64 {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// stallTraceOver is how late a wake-up of the stall watch must be for
// --stall-trace to write the trace; stallTraces how many it writes, at
// least stallTraceGap apart on the clock.
const (
	stallTraceOver = time.Second
	stallTraces    = 4
	stallTraceGap  = 30 * time.Second
)

// traceStall runs the runtime's flight recorder and writes its window at
// the first stallTraces wake-ups of vr's stall watch later than
// stallTraceOver, stallTraceGap apart (--stall-trace): to file, then
// file.2, file.3, …. stop ends it.
func traceStall(vr *swarm.VivaldiRun, file string, log io.Writer) (stop func(), err error) {
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 15 * time.Second, MaxBytes: 1 << 30})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("--stall-trace: %w", err)
	}
	var (
		mu      sync.Mutex
		written int
		last    time.Time
		stopped bool
		writing sync.WaitGroup
	)
	write := func(name string, due, woke time.Time) {
		f, err := os.Create(name)
		var n int64
		if err == nil {
			n, err = fr.WriteTo(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		fmt.Fprintf(log, "stall trace      %s: %d bytes ending %s after a wake-up %.1f s late (due %s); error %v\n",
			name, n, woke.Format("15:04:05.000"), woke.Sub(due).Seconds(), due.Format("15:04:05.000"), err)
	}
	if !vr.OnStall(stallTraceOver, func(due, woke time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if stopped || written == stallTraces || (written > 0 && woke.Sub(last) < stallTraceGap) {
			return
		}
		written++
		last = woke
		name := file
		if written > 1 {
			name = fmt.Sprintf("%s.%d", file, written)
		}
		writing.Go(func() { write(name, due, woke) })
	}) {
		fr.Stop()
		return nil, fmt.Errorf("%w: --stall-trace needs the stall watch (--stall, or --dilate above 1)", errUsage)
	}
	return func() {
		vr.OnStall(0, nil)
		mu.Lock()
		stopped = true
		mu.Unlock()
		writing.Wait()
		fr.Stop()
	}, nil
}

// printStalls prints what --stall discarded (nothing when it is off).
func printStalls(w io.Writer, st *swarm.Stalls) {
	if st == nil {
		return
	}
	fmt.Fprintf(w, "  stalls           %s\n", st)
}

// repelConnDefaults sets --conn-grace and --vivaldi-tidy, where not given,
// to the repel method's defaults when it runs. Its clients dial every
// candidate holder they measure: with a short grace and the tidy
// coordinate services a peer keeps under the high watermark
// (experiments/README.md, "Trimmed connections, and lookups of live
// tokens' names").
func repelConnDefaults(fs *flag.FlagSet, repelRuns bool, grace *time.Duration, tidy *bool) {
	if !repelRuns {
		return
	}
	if !flagSet(fs, "conn-grace") {
		*grace = swarm.RepelConnGrace
	}
	if !flagSet(fs, "vivaldi-tidy") {
		*tidy = true
	}
}
