package flood

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/repel"
	spb "github.com/superpeer-overlay/superpeer/superpeer/pb"
	"github.com/superpeer-overlay/superpeer/vivaldi"
	vpb "github.com/superpeer-overlay/superpeer/vivaldi/pb"
)

// attacker is one host flooding the victim. It has no resource manager
// of its own (go-libp2p's null one), so nothing on its side holds it back.
type attacker struct {
	h host.Host
	// reflected counts the streams the victim opened to it.
	reflected atomic.Uint64
}

func newAttacker(rng *rand.Rand) (*attacker, error) {
	key, err := newKey(rng)
	if err != nil {
		return nil, err
	}
	h, err := newHost(key, &network.NullResourceManager{})
	if err != nil {
		return nil, err
	}
	a := &attacker{h: h}
	// A declined survey comes back on a survey stream: take it, count it.
	h.SetStreamHandler(protoSurvey, func(s network.Stream) {
		a.reflected.Add(1)
		_, _ = io.Copy(io.Discard, io.LimitReader(s, 64<<10))
		_ = s.Close()
	})
	return a, nil
}

func (a *attacker) close() { _ = a.h.Close() }

// connect connects to the victim and waits for identify to tell the
// attacker its protocols (so that streams open without a round trip).
func (a *attacker) connect(ctx context.Context, v host.Host) error {
	if err := a.h.Connect(ctx, peer.AddrInfo{ID: v.ID(), Addrs: v.Addrs()}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ps, err := a.h.Peerstore().SupportsProtocols(v.ID(), protoAttach); err == nil && len(ps) == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("flood: identify did not tell the attacker the victim's protocols")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// frame is one stream's bytes, on proto.
type frame struct {
	proto protocol.ID
	b     []byte
}

func delimited(m proto.Message) ([]byte, error) {
	var buf bytesWriter
	if err := pbio.NewDelimitedWriter(&buf).WriteMsg(m); err != nil {
		return nil, err
	}
	return buf.b, nil
}

type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// frames are what the attacker sends for kind k to victim v, cycled
// through by its workers.
func (a *attacker) frames(k Kind, v *victim, rng *rand.Rand) ([]frame, error) {
	every := []protocol.ID{protoClosest, protoAttach, protoVivaldi, protoAnnounce, protoMove, protoSurvey}
	if v.method == "prefix" {
		every = []protocol.ID{protoClosest, protoAttach, protoCensus}
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	coord := vivaldi.Coord{Vec: make([]float64, vivaldi.DefaultConfig().Dimensions), Height: 1e-5, Error: 1}
	var out []frame
	switch k {
	case Garbage:
		for range 16 {
			for _, p := range every {
				out = append(out, frame{p, random(64 + rng.Intn(961))})
			}
		}
	case Oversized:
		for _, p := range every {
			out = append(out, frame{p, append(uvarint(1<<20), random(512)...)})
		}
	case AttachChurn:
		for _, leave := range []bool{false, true} {
			b, err := delimited(&spb.AttachRequest{Leave: leave})
			if err != nil {
				return nil, err
			}
			out = append(out, frame{protoAttach, b})
		}
	case Survey:
		me := string(a.h.ID())
		tok := repel.Token{ID: 0, Epoch: 1, Holder: me, HolderKey: repel.PeerKey(me), Coord: coord}
		ids := []string{me}
		for range 7 {
			key, err := newKey(rng)
			if err != nil {
				return nil, err
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				return nil, err
			}
			ids = append(ids, string(id))
		}
		b, err := delimited(repel.EncodeSurvey(repel.Message{Type: repel.MsgSurvey, Token: tok, Survey: ids}))
		if err != nil {
			return nil, err
		}
		out = append(out, frame{protoSurvey, b})
	case Move:
		held, ok := v.rsel.Held()
		if !ok {
			return nil, errors.New("flood: the repel victim holds no token to be offered")
		}
		held.Digest = nil
		b, err := delimited(repel.EncodeMove(repel.Message{Type: repel.MsgMove, To: string(v.h.ID()), Token: held}))
		if err != nil {
			return nil, err
		}
		out = append(out, frame{protoMove, b})
	case Census:
		for seq := range 16 {
			b, err := delimited(&spb.CensusDigest{S: 1, Entries: []*spb.CensusEntry{{
				Id: []byte(a.h.ID()), Peers: 1, Share: 1, Version: 1, Seq: uint64(seq + 1),
			}}})
			if err != nil {
				return nil, err
			}
			out = append(out, frame{protoCensus, b})
		}
	case Stall:
		// The first byte of a length prefix (100): the handler waits
		// for the rest.
		for _, p := range every {
			out = append(out, frame{p, []byte{100}})
		}
	case Silent:
		out = append(out, frame{protoAttach, nil})
	case Forge:
		// A mint gives way to any fresher version for DeadAfter: forge
		// against a token past that, as an attacker would.
		held, ok := v.rsel.Held()
		if !ok {
			return nil, errors.New("flood: the repel victim holds no token to forge")
		}
		if d := time.Until(held.HeldSince.Add(2 * v.dead)); d > 0 {
			time.Sleep(d) // the victim alone holds the token: it stays
		}
		me := string(a.h.ID())
		key := a.h.Peerstore().PrivKey(a.h.ID())
		for i := range uint64(64) {
			tok := repel.Token{ID: held.ID, Epoch: held.Epoch + 1 + i, Holder: me, HolderKey: repel.PeerKey(me), Coord: coord, Seq: 1}
			st, err := repel.SignToken(tok, key)
			if err != nil {
				return nil, err
			}
			b, err := delimited(st)
			if err != nil {
				return nil, err
			}
			out = append(out, frame{protoAnnounce, b})
		}
	case Probe:
		b, err := delimited(&vpb.Message{Coord: &vpb.Coordinate{Vec: coord.Vec, Height: coord.Height, Error: coord.Error}, WantNeighbors: 8})
		if err != nil {
			return nil, err
		}
		out = append(out, frame{protoVivaldi, b})
	default:
		return nil, fmt.Errorf("flood: unknown kind %q", k)
	}
	return out, nil
}

// maxHeld bounds the streams one worker holds open (Stall): past it the
// oldest is reset.
const maxHeld = 64

// flood opens streams to the victim until ctx ends, workers at once, each
// writing the next of frames, closing its side and reading whatever comes
// back (at most 1 s); with hold, it leaves each stream open instead (up to
// maxHeld a worker, the oldest reset past that) and resets them all at the
// end. It returns the frames written, the streams that could not be
// opened or written, and those the victim answered on.
func (a *attacker) flood(ctx context.Context, to peer.ID, frames []frame, workers int, hold bool) (sent, failed, answered uint64) {
	var s, f, ans atomic.Uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf [4096]byte
			var held []network.Stream
			defer func() {
				for _, st := range held {
					_ = st.Reset()
				}
			}()
			for i := w; ctx.Err() == nil; i++ {
				fr := frames[i%len(frames)]
				st, err := a.h.NewStream(ctx, to, fr.proto)
				if err != nil {
					f.Add(1)
					continue
				}
				_ = st.SetDeadline(time.Now().Add(time.Second))
				if fr.b == nil {
					// Silent: not even the protocol's name (lazy
					// negotiation sends it with the first write).
				} else if _, err := st.Write(fr.b); err != nil {
					f.Add(1)
					_ = st.Reset()
					continue
				}
				s.Add(1)
				if hold {
					if len(held) == maxHeld {
						_ = held[0].Reset()
						held = held[1:]
					}
					held = append(held, st)
					continue
				}
				_ = st.CloseWrite()
				got := 0
				for {
					n, err := st.Read(buf[:])
					got += n
					if err != nil {
						break
					}
				}
				if got > 0 {
					ans.Add(1)
				}
				_ = st.Close()
			}
		}()
	}
	wg.Wait()
	return s.Load(), f.Load(), ans.Load()
}
