package swarm

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ic "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/record"
	pstore "github.com/libp2p/go-libp2p/p2p/host/peerstore"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore/pstoremem"
	ma "github.com/multiformats/go-multiaddr"
)

// A swarm's hosts share one process, and every host learns the same few
// protocol lists, agent strings and addresses of the peers it meets.
// go-libp2p's in-memory peerstore keeps a copy of each for every host that
// knows the peer: a map of its protocols, a map of its metadata, and the
// multiaddrs identify and kad-dht decoded, with 256 locked segments for
// the protocols of every host. Together that is about a quarter of a
// repel swarm's live heap (experiments/README.md, "A swarm's peerstores").
//
// internedPeerstore keeps go-libp2p's in-memory key and address books and
// its latency metrics. A host holds a peer's protocol list as a pointer to
// one interned, immutable set for the whole swarm, and its metadata as a
// short list of pairs whose strings are interned; the addresses it is
// given are interned before they go into the address book. What a host
// sees is what pstoremem would show it; only the copies go.

// interner keeps one copy of each protocol set, metadata string and
// address a swarm's peerstores hold. It only grows, by the distinct values
// a swarm's peers announce: a few protocol lists and agent strings, and
// one address for each peer.
type interner struct {
	mu     sync.Mutex
	protos map[string]*protoSet
	strs   map[string]string
	addrs  map[string]ma.Multiaddr
}

func newInterner() *interner {
	return &interner{protos: map[string]*protoSet{}, strs: map[string]string{}, addrs: map[string]ma.Multiaddr{}}
}

// protoSet is an interned protocol list, sorted and without repeats.
// Never changed once made.
type protoSet struct{ ids []protocol.ID }

func (s *protoSet) has(p protocol.ID) bool {
	_, ok := slices.BinarySearch(s.ids, p)
	return ok
}

// set interns the set of ids.
func (in *interner) set(ids []protocol.ID) *protoSet {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var b strings.Builder
	for _, p := range sorted {
		// Length-prefixed: no two lists share a key, whatever bytes
		// their IDs hold.
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(string(p))
	}
	key := b.String()
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.protos[key]; ok {
		return s
	}
	for i, p := range sorted {
		sorted[i] = protocol.ID(in.strLocked(string(p)))
	}
	s := &protoSet{ids: slices.Clip(sorted)}
	in.protos[key] = s
	return s
}

func (in *interner) str(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.strLocked(s)
}

func (in *interner) strLocked(s string) string {
	if c, ok := in.strs[s]; ok {
		return c
	}
	s = strings.Clone(s)
	in.strs[s] = s
	return s
}

// addrList returns as with each address interned.
func (in *interner) addrList(as []ma.Multiaddr) []ma.Multiaddr {
	out := make([]ma.Multiaddr, len(as))
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, a := range as {
		if a == nil {
			continue
		}
		k := string(a.Bytes())
		c, ok := in.addrs[k]
		if !ok {
			c = a
			in.addrs[k] = c
		}
		out[i] = c
	}
	return out
}

// metaEntry is one metadata pair; a peer has a handful.
type metaEntry struct {
	key string
	val any
}

var errTooManyProtocols = errors.New("too many protocols")

// maxProtocols is pstoremem's default limit on a peer's protocols.
const maxProtocols = 128

type internedPeerstore struct {
	peerstore.Metrics
	keys  peerstore.KeyBook
	addrs certifiedAddrBook
	in    *interner

	mu     sync.RWMutex
	protos map[peer.ID]*protoSet
	meta   map[peer.ID][]metaEntry
}

// certifiedAddrBook is pstoremem's address book: it keeps signed peer
// records too (mocknet's hosts send none).
type certifiedAddrBook interface {
	peerstore.AddrBook
	peerstore.CertifiedAddrBook
}

var (
	_ peerstore.Peerstore         = (*internedPeerstore)(nil)
	_ peerstore.CertifiedAddrBook = (*internedPeerstore)(nil)
)

func newInternedPeerstore(in *interner, opts ...pstoremem.AddrBookOption) *internedPeerstore {
	return &internedPeerstore{
		Metrics: pstore.NewMetrics(),
		keys:    pstoremem.NewKeyBook(),
		addrs:   pstoremem.NewAddrBook(opts...),
		in:      in,
		protos:  map[peer.ID]*protoSet{},
		meta:    map[peer.ID][]metaEntry{},
	}
}

func (ps *internedPeerstore) Close() error {
	if c, ok := ps.addrs.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func (ps *internedPeerstore) ConsumePeerRecord(e *record.Envelope, ttl time.Duration) (bool, error) {
	return ps.addrs.ConsumePeerRecord(e, ttl)
}

func (ps *internedPeerstore) GetPeerRecord(p peer.ID) *record.Envelope {
	return ps.addrs.GetPeerRecord(p)
}

// Key book.

func (ps *internedPeerstore) PubKey(p peer.ID) ic.PubKey             { return ps.keys.PubKey(p) }
func (ps *internedPeerstore) AddPubKey(p peer.ID, k ic.PubKey) error { return ps.keys.AddPubKey(p, k) }
func (ps *internedPeerstore) PrivKey(p peer.ID) ic.PrivKey           { return ps.keys.PrivKey(p) }
func (ps *internedPeerstore) AddPrivKey(p peer.ID, k ic.PrivKey) error {
	return ps.keys.AddPrivKey(p, k)
}
func (ps *internedPeerstore) PeersWithKeys() peer.IDSlice { return ps.keys.PeersWithKeys() }

// Address book: pstoremem's, with the addresses interned.

func (ps *internedPeerstore) AddAddr(p peer.ID, a ma.Multiaddr, ttl time.Duration) {
	ps.AddAddrs(p, []ma.Multiaddr{a}, ttl)
}

func (ps *internedPeerstore) AddAddrs(p peer.ID, as []ma.Multiaddr, ttl time.Duration) {
	ps.addrs.AddAddrs(p, ps.in.addrList(as), ttl)
}

func (ps *internedPeerstore) SetAddr(p peer.ID, a ma.Multiaddr, ttl time.Duration) {
	ps.SetAddrs(p, []ma.Multiaddr{a}, ttl)
}

func (ps *internedPeerstore) SetAddrs(p peer.ID, as []ma.Multiaddr, ttl time.Duration) {
	ps.addrs.SetAddrs(p, ps.in.addrList(as), ttl)
}

func (ps *internedPeerstore) UpdateAddrs(p peer.ID, oldTTL, newTTL time.Duration) {
	ps.addrs.UpdateAddrs(p, oldTTL, newTTL)
}

func (ps *internedPeerstore) Addrs(p peer.ID) []ma.Multiaddr { return ps.addrs.Addrs(p) }
func (ps *internedPeerstore) ClearAddrs(p peer.ID)           { ps.addrs.ClearAddrs(p) }
func (ps *internedPeerstore) PeersWithAddrs() peer.IDSlice   { return ps.addrs.PeersWithAddrs() }

func (ps *internedPeerstore) AddrStream(ctx context.Context, p peer.ID) <-chan ma.Multiaddr {
	return ps.addrs.AddrStream(ctx, p)
}

// Protocol book.

func (ps *internedPeerstore) SetProtocols(p peer.ID, ids ...protocol.ID) error {
	if len(ids) > maxProtocols {
		return errTooManyProtocols
	}
	s := ps.in.set(ids)
	ps.mu.Lock()
	ps.protos[p] = s
	ps.mu.Unlock()
	return nil
}

func (ps *internedPeerstore) AddProtocols(p peer.ID, ids ...protocol.ID) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var had []protocol.ID
	if s := ps.protos[p]; s != nil {
		had = s.ids
	}
	if len(had)+len(ids) > maxProtocols {
		return errTooManyProtocols
	}
	ps.protos[p] = ps.in.set(append(slices.Clone(had), ids...))
	return nil
}

func (ps *internedPeerstore) RemoveProtocols(p peer.ID, ids ...protocol.ID) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	s := ps.protos[p]
	if s == nil {
		return nil
	}
	left := slices.DeleteFunc(slices.Clone(s.ids), func(q protocol.ID) bool { return slices.Contains(ids, q) })
	if len(left) == 0 {
		delete(ps.protos, p)
		return nil
	}
	ps.protos[p] = ps.in.set(left)
	return nil
}

func (ps *internedPeerstore) protoSet(p peer.ID) *protoSet {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	if s := ps.protos[p]; s != nil {
		return s
	}
	return &protoSet{}
}

func (ps *internedPeerstore) GetProtocols(p peer.ID) ([]protocol.ID, error) {
	return slices.Clone(ps.protoSet(p).ids), nil
}

func (ps *internedPeerstore) SupportsProtocols(p peer.ID, ids ...protocol.ID) ([]protocol.ID, error) {
	s := ps.protoSet(p)
	out := make([]protocol.ID, 0, len(ids))
	for _, q := range ids {
		if s.has(q) {
			out = append(out, q)
		}
	}
	return out, nil
}

func (ps *internedPeerstore) FirstSupportedProtocol(p peer.ID, ids ...protocol.ID) (protocol.ID, error) {
	s := ps.protoSet(p)
	for _, q := range ids {
		if s.has(q) {
			return q, nil
		}
	}
	return "", nil
}

// Metadata: string values (agent and protocol versions) interned.

func (ps *internedPeerstore) Put(p peer.ID, key string, val any) error {
	if s, ok := val.(string); ok {
		val = ps.in.str(s)
	}
	key = ps.in.str(key)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	es := ps.meta[p]
	for i := range es {
		if es[i].key == key {
			es[i].val = val
			return nil
		}
	}
	ps.meta[p] = append(es, metaEntry{key, val})
	return nil
}

func (ps *internedPeerstore) Get(p peer.ID, key string) (any, error) {
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	for _, e := range ps.meta[p] {
		if e.key == key {
			return e.val, nil
		}
	}
	return nil, peerstore.ErrNotFound
}

// The whole store.

func (ps *internedPeerstore) PeerInfo(p peer.ID) peer.AddrInfo {
	return peer.AddrInfo{ID: p, Addrs: ps.addrs.Addrs(p)}
}

func (ps *internedPeerstore) Peers() peer.IDSlice {
	set := map[peer.ID]struct{}{}
	for _, p := range ps.keys.PeersWithKeys() {
		set[p] = struct{}{}
	}
	for _, p := range ps.addrs.PeersWithAddrs() {
		set[p] = struct{}{}
	}
	out := make(peer.IDSlice, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	return out
}

// RemovePeer forgets p's keys, protocols, metadata and latency, not its
// addresses, as pstoremem does.
func (ps *internedPeerstore) RemovePeer(p peer.ID) {
	ps.keys.RemovePeer(p)
	ps.Metrics.RemovePeer(p)
	ps.mu.Lock()
	delete(ps.protos, p)
	delete(ps.meta, p)
	ps.mu.Unlock()
}

// internedHost adds a mocknet host with an interned peerstore, as
// mocknet's AddPeer does with its own.
func (s *Swarm) internedHost(sk ic.PrivKey, a ma.Multiaddr) (host.Host, error) {
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return nil, err
	}
	ps := newInternedPeerstore(s.in)
	ps.AddAddr(id, a, peerstore.PermanentAddrTTL)
	if err := ps.AddPrivKey(id, sk); err != nil {
		_ = ps.Close()
		return nil, err
	}
	if err := ps.AddPubKey(id, sk.GetPublic()); err != nil {
		_ = ps.Close()
		return nil, err
	}
	h, err := s.mn.AddPeerWithPeerstore(id, ps)
	if err != nil {
		_ = ps.Close()
	}
	return h, err
}
