package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StatusPort is the port every peer serves /status on, at its address.
const StatusPort = 8080

// Proc is a process running in a peer's namespace.
type Proc struct {
	Index int
	Pid   int
	done  chan struct{}
	err   error
}

// Exited is closed once the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Err is how the process ended (valid once Exited is closed).
func (p *Proc) Err() error { return p.err }

// PeerNice is how much nicer than the bed its peers run by default
// (Bed.PeerNice): the delay line is the network, and a network starved by
// its hosts' CPU delays every packet past the matrix's RTT. The lowest
// priority there is: with 120 peer processes on two cores the delay
// line's median packet left 312 ms late at nice 5 and 0.31 ms at 19
// (experiments/README.md, "peer testbed").
const PeerNice = 19

// Start runs argv in peer i's namespace (`ip netns exec`, which execs it:
// the process is argv itself), b.PeerNice nicer than this process, its
// output appended to logPath, in a process group of its own, killed if
// this process dies.
func (b *Bed) Start(i int, argv []string, env []string, logPath string) (*Proc, error) {
	if nice, err := exec.LookPath("nice"); err == nil && b.PeerNice != 0 {
		argv = append([]string{nice, "-n", strconv.Itoa(b.PeerNice)}, argv...)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := b.Exec(i, argv...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	p := &Proc{Index: i, Pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// Kill sends SIGKILL (kill -9) and waits for the process to end.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// RSS is the process's resident memory in bytes (0 if unknown).
func (p *Proc) RSS() uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// StatusAddr is peer i's status address (host:port).
func (b *Bed) StatusAddr(i int) string {
	return net.JoinHostPort(b.Plan.Addr(i).String(), strconv.Itoa(StatusPort))
}

// Poller reads the peers' /status from the root namespace over the bridge.
type Poller struct {
	bed    *Bed
	client *http.Client
}

// NewPoller makes a status reader; each request gives up after timeout.
func (b *Bed) NewPoller(timeout time.Duration) *Poller {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	return &Poller{bed: b, client: &http.Client{Transport: tr, Timeout: timeout}}
}

// Status reads peer i's /status.
func (p *Poller) Status(ctx context.Context, i int) (*Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.bed.StatusAddr(i)+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("peer %d: /status: %s", i, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("peer %d: /status: %w", i, err)
	}
	return &st, nil
}

// All reads the status of every peer with want[i], width at once; a peer
// that does not answer gets nil.
func (p *Poller) All(ctx context.Context, want []bool, width int) []*Status {
	out := make([]*Status, len(want))
	var wg sync.WaitGroup
	sem := make(chan struct{}, width)
	for i, w := range want {
		if !w {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if st, err := p.Status(ctx, i); err == nil {
				out[i] = st
			}
		}(i)
	}
	wg.Wait()
	return out
}

// Close drops the reader's idle connections.
func (p *Poller) Close() { p.client.CloseIdleConnections() }
