package dht

import (
	"context"
	"fmt"
	"time"

	kadpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"

	"github.com/superpeer-overlay/superpeer/internal/frame"
)

// oneShotSender sends each kad-dht request on a stream of its own and closes
// it after the answer. kad-dht's own sender keeps one stream open per peer it
// ever asked, and the answering side keeps a goroutine reading each of them:
// with thousands of peers in one process those idle streams (three
// goroutines apiece) were most of the memory. Stream opening costs no round
// trip here (multistream negotiation is pipelined with the first message),
// so the only price is a little framing.
//
// Each request ends after timeout (half the lookup timeout: 10 s by
// default, as kad-dht's own sender gives up reading an answer after 10 s).
// A lookup asks its peers with the lookup's deadline, and one peer that
// never answers (gone, or its identify lost on a loaded mocknet) would
// otherwise hold the whole lookup until that deadline and fail it, where
// kad-dht, told the request failed, goes on with the others (and drops that
// peer from its routing table, as with its own sender).
type oneShotSender struct {
	h       host.Host
	protos  []protocol.ID
	stats   *Stats
	timeout time.Duration
}

func (m *oneShotSender) OnDisconnect(context.Context, peer.ID) {}

func (m *oneShotSender) open(ctx context.Context, p peer.ID, mes *kadpb.Message) (network.Stream, func() bool, error) {
	m.stats.KadSent.Add(1)
	s, err := m.h.NewStream(ctx, p, m.protos...)
	if err != nil {
		return nil, nil, err
	}
	// mocknet ignores deadlines: a cancelled request resets its stream.
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	if err := pbio.NewDelimitedWriter(s).WriteMsg(mes); err != nil {
		stop()
		_ = s.Reset()
		return nil, nil, err
	}
	return s, stop, nil
}

func (m *oneShotSender) SendRequest(ctx context.Context, p peer.ID, mes *kadpb.Message) (*kadpb.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	s, stop, err := m.open(ctx, p, mes)
	if err != nil {
		return nil, err
	}
	defer stop()
	// No CloseWrite before the answer: mocknet delivers a closing writer's
	// data at once, ahead of the link delay, and requests would travel free.
	reply := new(kadpb.Message)
	if err := frame.ReadMsg(s, network.MessageSizeMax, reply); err != nil {
		_ = s.Reset()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("kad answer from %s: %w", p, err)
	}
	_ = s.Close()
	return reply, nil
}

func (m *oneShotSender) SendMessage(ctx context.Context, p peer.ID, mes *kadpb.Message) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	s, stop, err := m.open(ctx, p, mes)
	if err != nil {
		return err
	}
	stop()
	return s.Close()
}

// WithReuseStreams keeps kad-dht's own message sender, which holds one stream
// open per peer it has asked (fewer stream openings, far more goroutines).
func WithReuseStreams() Option {
	return func(c *config) error {
		c.kadOnly = append(c.kadOnly, "WithReuseStreams")
		c.reuseStreams = true
		return nil
	}
}
