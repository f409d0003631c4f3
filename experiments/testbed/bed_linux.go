package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bed is a plan made real: the namespaces, the bridge, the veths, the
// shaping, and with the tun shaper the router and its delay line.
type Bed struct {
	Plan *Plan
	// Delay is the tun shaper's delay line (nil with netem).
	Delay *DelayLine
	// PeerNice is how much nicer than this process Start runs the peers
	// (0 to 19; Up sets PeerNice).
	PeerNice int

	logf      func(format string, args ...any)
	tun       *os.File
	stopDelay context.CancelFunc
	delayDone chan error
	cut       map[int]bool
	side      []int
}

// Available says why this machine cannot hold a bed (nil: it can): root,
// and `ip netns` that works.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("testbed: needs root (network namespaces, veths, tc)")
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("testbed: %s not found (iproute2)", tool)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("testbed: ip netns list: %v: %s", err, bytes.TrimSpace(out))
	}
	// A shaper: the TUN delay line needs /dev/net/tun, netem the kernel's
	// sch_netem.
	if _, err := os.Stat("/dev/net/tun"); err != nil && !ProbeNetem(newProbeID()) {
		return fmt.Errorf("testbed: no shaper: neither /dev/net/tun (%v) nor sch_netem", err)
	}
	return nil
}

// newProbeID names a netem probe: the process and the time, short enough
// for an interface name.
func newProbeID() string { return fmt.Sprintf("p%x", (os.Getpid()^int(time.Now().UnixNano()))&0xffff) }

// run runs a command, with input on its stdin if non-empty, and returns
// its error with what it printed.
func run(input string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if input != "" {
		cmd.Stdin = strings.NewReader(input)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, firstLines(string(out), 6))
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], fmt.Sprintf("... (%d lines more)", len(lines)-n))
	}
	return strings.Join(lines, "\n")
}

// ProbeNetem says whether the kernel has sch_netem: it adds a netem qdisc
// to the loopback of a scratch namespace (named for the run) and removes
// the namespace again.
func ProbeNetem(runID string) bool {
	ns := Prefix + runID + "-probe"
	if run("", "ip", "netns", "add", ns) != nil {
		return false
	}
	defer run("", "ip", "netns", "del", ns)
	return run("", "tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") == nil
}

// Up makes the plan's bed. On error it removes whatever it made. logf
// reports progress (nil: quiet).
func Up(ctx context.Context, p *Plan, seed int64, logf func(string, ...any)) (b *Bed, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b = &Bed{Plan: p, PeerNice: PeerNice, logf: logf, cut: map[int]bool{}}
	defer func() {
		if err != nil {
			if derr := b.Down(); derr != nil {
				err = fmt.Errorf("%w; cleaning up: %v", err, derr)
			}
			b = nil
		}
	}()
	if p.NATCount() > 0 {
		if _, err := exec.LookPath("nft"); err != nil {
			return b, errors.New("testbed: NAT'd peers need nft (nftables)")
		}
	}
	t0 := time.Now()
	if err := run(p.RootBatch(), "ip", "-batch", "-"); err != nil {
		return b, err
	}
	logf("%d namespaces, bridge %s (%s), veths in %.1f s", p.N, p.Bridge(), p.Subnet(), time.Since(t0).Seconds())
	err = parallel(ctx, p.N, 4, func(i int) error {
		if err := run(p.NamespaceBatch(i), "ip", "-n", p.Namespace(i), "-batch", "-"); err != nil {
			return err
		}
		if p.NATed(i) {
			if err := upNAT(p, i); err != nil {
				return err
			}
		}
		if p.Shaper == Netem {
			return run(p.NetemBatch(i), "tc", "-n", p.Namespace(i), "-batch", "-")
		}
		return nil
	})
	if err != nil {
		return b, err
	}
	if p.Shaper == TUN {
		if b.tun, err = openTUNIn(p.RouterNamespace(), TunDev); err != nil {
			return b, err
		}
		if err := run(p.RouterBatch(), "ip", "-n", p.RouterNamespace(), "-batch", "-"); err != nil {
			return b, err
		}
		b.Delay = NewDelayLine(p, seed)
		dctx, cancel := context.WithCancel(context.Background())
		b.stopDelay, b.delayDone = cancel, make(chan error, 1)
		go func() { b.delayDone <- b.Delay.Run(dctx, b.tun) }()
	}
	if n := p.NATCount(); n > 0 {
		if err := writeHosts(p); err != nil {
			return b, fmt.Errorf("testbed: hosts files: %w", err)
		}
		logf("%d of %d peers behind a NAT; the public ones named in every namespace's /etc/hosts", n, p.N)
	}
	logf("addresses and %s shaping in %.1f s", p.Shaper, time.Since(t0).Seconds())
	return b, nil
}

// parallel runs f(0) … f(n-1), at most width at once, and returns the
// first error.
func parallel(ctx context.Context, n, width int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, width)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// upNAT makes NAT'd peer i's namespace its home router once RootBatch and
// NamespaceBatch(i) made the veth between them: the inner namespace's
// address and route, forwarding, and the NAT's rules.
func upNAT(p *Plan, i int) error {
	if err := run(p.InnerBatch(i), "ip", "-n", p.InnerNamespace(i), "-batch", "-"); err != nil {
		return err
	}
	if err := setSysctlsIn(p.Namespace(i), NATSysctls); err != nil {
		return err
	}
	return run(p.NATRuleset(i), "ip", "netns", "exec", p.Namespace(i), "nft", "-f", "-")
}

// EtcNetns is where `ip netns exec NAME` finds files it bind-mounts over
// /etc's for that namespace's processes.
const EtcNetns = "/etc/netns"

// writeHosts gives every peer's namespace an /etc/hosts (bind-mounted by
// `ip netns exec`) that names the public peers (Plan.Hosts).
func writeHosts(p *Plan) error {
	hosts := p.Hosts()
	for i := 0; i < p.N; i++ {
		dir := filepath.Join(EtcNetns, p.PeerNamespace(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Exec is the command that runs argv inside peer i's namespace
// (PeerNamespace: behind its NAT if it has one).
func (b *Bed) Exec(i int, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", b.Plan.PeerNamespace(i)}, argv...)...)
}

// Cut takes peer i's bridge port down: nothing reaches it, nor leaves it
// (a NAT'd peer is cut with its router).
func (b *Bed) Cut(i int) error {
	b.cut[i] = true
	return run("", "ip", "link", "set", b.Plan.HostVeth(i), "down")
}

// Restore brings a cut peer's port back up.
func (b *Bed) Restore(i int) error {
	delete(b.cut, i)
	return run("", "ip", "link", "set", b.Plan.HostVeth(i), "up")
}

// Partition drops every packet between peers on different sides (side[i]
// 1 or 2, 0: on both) until Heal; the status reader still reaches all.
func (b *Bed) Partition(side []int) error {
	b.side = append([]int(nil), side...)
	if b.Delay != nil {
		b.Delay.SetSides(side)
		return nil
	}
	return parallel(context.Background(), b.Plan.N, 4, func(i int) error {
		if batch := b.Plan.NetemPartitionBatch(i, side); batch != "" {
			return run(batch, "tc", "-n", b.Plan.Namespace(i), "-batch", "-")
		}
		return nil
	})
}

// Heal ends a partition.
func (b *Bed) Heal() error {
	side := b.side
	b.side = nil
	if b.Delay != nil {
		b.Delay.SetSides(nil)
		return nil
	}
	return parallel(context.Background(), b.Plan.N, 4, func(i int) error {
		if b.Plan.NetemPartitionBatch(i, side) == "" {
			return nil
		}
		return run(b.Plan.NetemHealBatch(), "tc", "-n", b.Plan.Namespace(i), "-batch", "-")
	})
}

// Down removes everything of the bed: kills what still runs in its
// namespaces (NAT'd peers' inner ones too: all are named for the run),
// stops the delay line, deletes the veths, the bridge and the namespaces,
// and checks that nothing of the run is left.
func (b *Bed) Down() error {
	if b.stopDelay != nil {
		b.stopDelay()
		<-b.delayDone
		b.stopDelay = nil
	}
	if b.tun != nil {
		b.tun.Close()
		b.tun = nil
	}
	return removeAll(Prefix+b.Plan.RunID, b.logf)
}

// Cleanup removes every namespace and link named with prefix (Prefix for
// every bed's leftovers), killing the processes still in those namespaces.
func Cleanup(prefix string, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return removeAll(prefix, logf)
}

// removeAll deletes the namespaces and links named with prefix, twice if
// need be (a namespace's veth ends go when the namespace does, a moment
// later), and returns an error naming whatever is left.
func removeAll(prefix string, logf func(string, ...any)) error {
	for attempt := 0; ; attempt++ {
		nss, links, err := Leftovers(prefix)
		if err != nil {
			return err
		}
		if len(nss) == 0 && len(links) == 0 {
			return nil
		}
		if attempt == 3 {
			return fmt.Errorf("testbed: left behind: namespaces %v, links %v", nss, links)
		}
		killed := 0
		for _, ns := range nss {
			killed += killIn(ns)
		}
		if killed > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if attempt == 0 {
			logf("removing %d namespaces and %d links named %s* (%d processes killed)", len(nss), len(links), prefix, killed)
		}
		// -force: go on past a name already gone.
		_ = run(TeardownBatch(links, nss), "ip", "-force", "-batch", "-")
		for _, ns := range nss {
			_ = os.RemoveAll(filepath.Join(EtcNetns, ns))
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
}

// killIn sends SIGKILL to every process in a namespace and says how many.
func killIn(ns string) int {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// Leftovers lists the namespaces and root-namespace links named with
// prefix.
func Leftovers(prefix string) (namespaces, links []string, err error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ip netns list: %w", err)
	}
	for _, ns := range ParseNetnsList(string(out)) {
		if strings.HasPrefix(ns, prefix) {
			namespaces = append(namespaces, ns)
		}
	}
	// A namespace's files (WriteHosts) outlive it: they count as the
	// namespace left behind.
	if ents, err := os.ReadDir(EtcNetns); err == nil {
		for _, e := range ents {
			if name := e.Name(); strings.HasPrefix(name, prefix) && !slices.Contains(namespaces, name) {
				namespaces = append(namespaces, name)
			}
		}
	}
	out, err = exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("ip link show: %w", err)
	}
	for _, l := range ParseLinkNames(string(out)) {
		if strings.HasPrefix(l, prefix) {
			links = append(links, l)
		}
	}
	return namespaces, links, nil
}
