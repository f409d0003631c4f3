package elections

import (
	"fmt"
	"time"
)

// Master–backup with fencing, in the style of Hadoop's HDFS high
// availability: node 0 is the coordinator, a ZooKeeper-like lease and
// epoch store (the failover controllers' lock znode, its session timeout
// the lease); node 1 is the shared storage the master writes to (the
// quorum journal); nodes 2.. are the candidates, node 2 the first master
// and the others backups.
//
// A candidate asks the coordinator for the lease; the coordinator grants
// it with the next epoch, the fencing token, when no lease is held, and
// otherwise refuses and watches for the asker: when the lease runs out
// unrenewed, it tells its watchers, who ask again, and the first to ask
// is the new master. A master renews its lease, counts it from when it
// asked (so its own view ends before the coordinator's), and writes to the
// storage with its epoch.
//
// The failure: the master stops, a stop-the-world pause longer than its
// lease. A backup takes over with a higher epoch. When the old master
// resumes, the inputs that waited run in order: its write timer, due
// first, finds it still master (the step that would tell it otherwise, the
// end of its lease, waits behind it), so it writes with its stale epoch.
// With the epoch fence (the journal's promise to a newer writer) the
// storage refuses any epoch below the highest it has seen and tells the
// writer, which steps down; without it the stale write is accepted after
// the new master's: split brain.
type mbCandidate struct {
	cfg    Config
	master bool
	epoch  int
	// expiry is the end of the lease as the master sees it.
	expiry time.Duration
	// holder is whom the candidate takes for master (itself if master;
	// -1 if it does not know).
	holder int
	seq    int
	// term counts the terms as master and lease the leases granted: a
	// write or renewal timer of an earlier term is dropped, and so is the
	// end of a lease since renewed.
	term, lease int
}

// mbCoordinator is node 0, the lease and epoch store.
type mbCoordinator struct {
	holder, epoch int
	expiry        time.Duration
	watchers      []int
	checks        int
}

// mbStorage is node 1, the shared storage.
type mbStorage struct {
	fence bool
	// highest is the highest epoch seen (accepted or refused); writer the
	// node that wrote with it.
	highest, writer int
	// accepted and refused count writes; stale counts writes accepted with
	// an epoch below one accepted before (the split brain), staleFirst the
	// first such: its epoch and the higher one before it.
	accepted, refused, stale int
	staleFirst               [2]int
}

const (
	mbCoordinatorIndex = 0
	mbStorageIndex     = 1
	mbFirstMaster      = 2

	// mbLease is the lease (a ZooKeeper session timeout); a master renews
	// it every mbRenewEvery and writes every mbWriteEvery. A backup joins
	// mbStandbyAfter its start, once the first master holds the lease.
	mbLease        = 2 * time.Second
	mbRenewEvery   = 500 * time.Millisecond
	mbWriteEvery   = 100 * time.Millisecond
	mbStandbyAfter = 500 * time.Millisecond

	// The failure model: the first master pauses at mbPauseAt for
	// mbPauseFor, longer than its lease; the run ends at mbEnd.
	mbPauseAt  = 3 * time.Second
	mbPauseFor = 5 * time.Second
	mbEnd      = mbPauseAt + mbPauseFor + 4*time.Second
)

// Messages.
type (
	// mbAcquire asks for the lease; At is when (the lease's start as the
	// asker counts it).
	mbAcquire struct{ At time.Duration }
	// mbRenew renews the lease of epoch Epoch.
	mbRenew struct {
		Epoch int
		At    time.Duration
	}
	// mbGrant grants (or renews) the lease of Epoch asked for at At.
	mbGrant struct {
		Epoch int
		At    time.Duration
	}
	// mbDeny refuses: Holder holds the lease of Epoch; the coordinator
	// watches for the asker.
	mbDeny struct{ Holder, Epoch int }
	// mbExpired tells a watcher that the lease of Epoch ran out.
	mbExpired struct{ Epoch int }
	// mbWrite is a master's write, with its epoch as fencing token.
	mbWrite struct{ Epoch, Seq int }
	// mbWriteOK accepts a write; mbFenced refuses one, Highest being the
	// epoch seen.
	mbWriteOK struct{ Epoch, Seq int }
	mbFenced  struct{ Epoch, Highest int }
)

func (mbAcquire) Kind() string { return "ACQUIRE" }
func (mbRenew) Kind() string   { return "RENEW" }
func (mbGrant) Kind() string   { return "GRANT" }
func (mbDeny) Kind() string    { return "DENY" }
func (mbExpired) Kind() string { return "EXPIRED" }
func (mbWrite) Kind() string   { return "WRITE" }
func (mbWriteOK) Kind() string { return "WRITE-OK" }
func (mbFenced) Kind() string  { return "FENCED" }

func (m mbRenew) String() string   { return fmt.Sprintf("epoch %d", m.Epoch) }
func (m mbGrant) String() string   { return fmt.Sprintf("epoch %d", m.Epoch) }
func (m mbDeny) String() string    { return fmt.Sprintf("held by %d, epoch %d", m.Holder, m.Epoch) }
func (m mbExpired) String() string { return fmt.Sprintf("epoch %d", m.Epoch) }
func (m mbWrite) String() string   { return fmt.Sprintf("epoch %d #%d", m.Epoch, m.Seq) }
func (m mbWriteOK) String() string { return fmt.Sprintf("epoch %d #%d", m.Epoch, m.Seq) }
func (m mbFenced) String() string  { return fmt.Sprintf("epoch %d < %d", m.Epoch, m.Highest) }

func newMasterBackup(fence bool) func(Config) Node {
	return func(c Config) Node {
		switch c.Index {
		case mbCoordinatorIndex:
			return &mbCoordinator{holder: -1}
		case mbStorageIndex:
			return &mbStorage{fence: fence, writer: -1}
		}
		return &mbCandidate{cfg: c, holder: -1}
	}
}

// Coordinator.

func (c *mbCoordinator) Start(time.Duration, *Out) {}

func (c *mbCoordinator) Receive(now time.Duration, from int, m Message, o *Out) {
	switch m := m.(type) {
	case mbAcquire:
		if c.holder < 0 {
			c.epoch++
			c.holder = from
			c.renewed(now, o)
			o.Send(from, mbGrant{Epoch: c.epoch, At: m.At})
			return
		}
		c.deny(from, o)
	case mbRenew:
		if c.holder == from && m.Epoch == c.epoch {
			c.renewed(now, o)
			o.Send(from, mbGrant{Epoch: c.epoch, At: m.At})
			return
		}
		c.deny(from, o)
	}
}

func (c *mbCoordinator) renewed(now time.Duration, o *Out) {
	c.expiry = now + mbLease
	c.checks++
	o.After(mbLease, c.checks)
}

func (c *mbCoordinator) deny(to int, o *Out) {
	o.Send(to, mbDeny{Holder: c.holder, Epoch: c.epoch})
	for _, w := range c.watchers {
		if w == to {
			return
		}
	}
	c.watchers = append(c.watchers, to)
}

// Timeout ends a lease not renewed in time and tells the watchers (one
// shot, as ZooKeeper's watches are).
func (c *mbCoordinator) Timeout(now time.Duration, tag int, o *Out) {
	if tag != c.checks || c.holder < 0 || now < c.expiry {
		return
	}
	c.holder = -1
	for _, w := range c.watchers {
		o.Send(w, mbExpired{Epoch: c.epoch})
	}
	c.watchers = nil
}

// Leader is the lease holder.
func (c *mbCoordinator) Leader() int { return c.holder }

// Storage.

func (s *mbStorage) Start(time.Duration, *Out)        {}
func (s *mbStorage) Timeout(time.Duration, int, *Out) {}

func (s *mbStorage) Receive(_ time.Duration, from int, m Message, o *Out) {
	w, ok := m.(mbWrite)
	if !ok {
		return
	}
	if s.fence && w.Epoch < s.highest {
		s.refused++
		o.Send(from, mbFenced{Epoch: w.Epoch, Highest: s.highest})
		return
	}
	s.accepted++
	if w.Epoch < s.highest {
		if s.stale == 0 {
			s.staleFirst = [2]int{w.Epoch, s.highest}
		}
		s.stale++
	} else {
		s.highest, s.writer = w.Epoch, from
	}
	o.Send(from, mbWriteOK{Epoch: w.Epoch, Seq: w.Seq})
}

// Leader is the writer of the highest epoch the storage accepted.
func (s *mbStorage) Leader() int { return s.writer }

// Candidates.

const (
	mbStandby = iota
	mbWriteTick
	mbRenewTick
	mbLeaseEnd
	mbKinds
)

func (n *mbCandidate) Start(now time.Duration, o *Out) {
	if n.cfg.Initiator {
		o.Send(mbCoordinatorIndex, mbAcquire{At: now})
		return
	}
	o.After(mbStandbyAfter, mbStandby)
}

func (n *mbCandidate) Receive(now time.Duration, _ int, m Message, o *Out) {
	switch m := m.(type) {
	case mbGrant:
		if !n.master || m.Epoch != n.epoch {
			n.master, n.epoch, n.holder = true, m.Epoch, n.cfg.Index
			n.term++
			n.after(0, mbWriteTick, o)
			n.after(mbRenewEvery, mbRenewTick, o)
		}
		n.expiry = max(n.expiry, m.At+mbLease)
		n.lease++
		o.After(n.expiry-now, n.lease*mbKinds+mbLeaseEnd)
	case mbDeny:
		n.master = false
		n.holder = m.Holder
	case mbExpired:
		n.holder = -1
		o.Send(mbCoordinatorIndex, mbAcquire{At: now})
	case mbFenced:
		if n.master && m.Epoch == n.epoch {
			// Deposed: ask the coordinator, to learn who holds the lease.
			n.stepDown(now, o)
		}
	}
}

func (n *mbCandidate) after(d time.Duration, kind int, o *Out) {
	o.After(d, n.term*mbKinds+kind)
}

func (n *mbCandidate) stepDown(now time.Duration, o *Out) {
	n.master, n.holder = false, -1
	o.Send(mbCoordinatorIndex, mbAcquire{At: now})
}

func (n *mbCandidate) Timeout(now time.Duration, tag int, o *Out) {
	gen, kind := tag/mbKinds, tag%mbKinds
	switch kind {
	case mbStandby:
		o.Send(mbCoordinatorIndex, mbAcquire{At: now})
		return
	case mbLeaseEnd:
		if gen == n.lease && n.master && now >= n.expiry {
			n.stepDown(now, o)
		}
		return
	}
	if gen != n.term || !n.master {
		return
	}
	switch kind {
	case mbWriteTick:
		// No look at the clock: the master writes while it has not
		// processed the end of its lease.
		n.seq++
		o.Send(mbStorageIndex, mbWrite{Epoch: n.epoch, Seq: n.seq})
		n.after(mbWriteEvery, mbWriteTick, o)
	case mbRenewTick:
		o.Send(mbCoordinatorIndex, mbRenew{Epoch: n.epoch, At: now})
		n.after(mbRenewEvery, mbRenewTick, o)
	}
}

// Leader is the node the candidate takes for master.
func (n *mbCandidate) Leader() int { return n.holder }

// CheckMasterBackup judges a master–backup run: one candidate believes it
// is master and every live node names it (OneLeader), and the storage
// accepted no write of a stale master (RightLeader).
func CheckMasterBackup(r Result) Verdict {
	var masters []int
	for i, nd := range r.Nodes {
		if c, ok := nd.(*mbCandidate); ok && r.Live[i] && c.master {
			masters = append(masters, i)
		}
	}
	ls := r.LiveLeaders()
	if len(masters) != 1 || len(ls) != 1 || ls[0] != masters[0] {
		return Verdict{Note: fmt.Sprintf("masters %v, live nodes name %v", masters, ls)}
	}
	if len(r.Nodes) > mbStorageIndex {
		if s := r.Nodes[mbStorageIndex].(*mbStorage); s.stale > 0 {
			return Verdict{OneLeader: true, Note: fmt.Sprintf("split brain: storage accepted %d stale writes (epoch %d after %d)", s.stale, s.staleFirst[0], s.staleFirst[1])}
		}
	}
	return Verdict{OneLeader: true, RightLeader: true}
}

func init() {
	for _, v := range []struct {
		variant, summary string
		fence            bool
	}{
		{"", "master–backup with a lease store and an epoch fence: the master paused past its lease is replaced; its stale writes are refused", true},
		{"no-fence", "master–backup without the fence: the paused master's stale write is accepted after the new master's (split brain shown)", false},
	} {
		register(Algorithm{
			Name: "master-backup", Variant: v.variant, Summary: v.summary,
			Scenario: func(n int, seed int64) Scenario {
				return Scenario{
					N: n, Seed: seed, Topology: Complete,
					Initiators: []int{mbFirstMaster},
					Faults: []Fault{
						{At: mbPauseAt, Kind: Pause, Node: mbFirstMaster},
						{At: mbPauseAt + mbPauseFor, Kind: Resume, Node: mbFirstMaster},
					},
					Limit: mbEnd,
				}
			},
			New: newMasterBackup(v.fence), Check: CheckMasterBackup,
			Sizes: []int{4, 8, 16, 32, 64}, Quick: []int{4, 16},
		})
	}
}
