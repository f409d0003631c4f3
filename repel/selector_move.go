package repel

import (
	"context"
	"errors"
	"time"

	lpnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/superpeer-overlay/superpeer/internal/frame"
	"github.com/superpeer-overlay/superpeer/repel/pb"
)

// gone reports whether a read failed because the stream failed (ended,
// reset, closed: a peer that went away or gave up), not because of what it
// sent.
func gone(err error) bool {
	return errors.Is(err, frame.ErrStreamFailed) || errors.Is(err, context.Canceled)
}

// streamTimeout bounds one move, survey or announce stream.
func (s *Selector) streamTimeout() time.Duration {
	return max(moveStreamTimeout, s.opts.Config.MoveTimeout)
}

// sendFrame sends f to p on a stream of protocol id of its own,
// unanswered, and counts it under sent and bytes, or under lost if no
// stream opened.
func (s *Selector) sendFrame(p peer.ID, id protocol.ID, f proto.Message, lost, sent, bytes string) {
	ctx, cancel := context.WithTimeout(s.ctx, s.streamTimeout())
	defer cancel()
	st, err := s.node.Host().NewStream(ctx, p, id)
	if err != nil {
		s.stats.Add(lost, 1)
		return
	}
	defer context.AfterFunc(ctx, func() { _ = st.Reset() })()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	if err := pbio.NewDelimitedWriter(st).WriteMsg(f); err != nil {
		s.drops.Add(dropWrite, 1)
		_ = st.Reset()
		return
	}
	s.stats.Add(sent, 1)
	s.stats.Add(bytes, uint64(proto.Size(f)))
	_ = st.Close()
}

// readIncoming reads the one frame an incoming stream opens with, capped
// at max, into f. A stream past its peer's rate is not read (a rate drop),
// a stream that fails first counts as lost (stat), a frame that does not
// decode as a decode drop; in each case the stream is reset and
// readIncoming reports false.
func (s *Selector) readIncoming(st lpnet.Stream, max int, f proto.Message, lost, what string) bool {
	if !s.limit.Allow(time.Now(), string(st.Conn().RemotePeer())) {
		s.drops.Add(dropRate, 1)
		_ = st.Reset()
		return false
	}
	err := frame.Read(st, max, f)
	if err == nil {
		return true
	}
	if gone(err) {
		s.stats.Add(lost, 1)
	} else {
		s.drops.Add(dropDecode, 1)
		log.Debugw("repel: bad "+what+" frame", "from", st.Conn().RemotePeer(), "err", err)
	}
	_ = st.Reset()
	return false
}

// handleMove answers a move offer: one MOVE frame in, the model's ACK or
// REFUSE out. A frame that does not decode or is not a MOVE resets the
// stream and is counted; the peer carries on.
func (s *Selector) handleMove(st lpnet.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	from := st.Conn().RemotePeer()
	var f pb.MoveFrame
	if !s.readIncoming(st, maxMoveFrame, &f, statMoveLost, "move") {
		return
	}
	m, reason, err := decodeMove(&f, from, s.node.ID(), pb.MoveFrame_MOVE)
	if err == nil {
		// The new holder announces the offer's certificate: it must be
		// the giver's.
		if err = verifyHandover(m.Token, s.node.Host().Peerstore().PubKey); err != nil {
			reason = dropCert
		}
	}
	if err != nil {
		s.drops.Add(reason, 1)
		log.Debugw("repel: bad move frame", "from", from, "reason", reason, "err", err)
		_ = st.Reset()
		return
	}
	reply := make(chan *Message, 1)
	ctx, cancel := context.WithTimeout(s.ctx, s.streamTimeout())
	defer cancel()
	// mocknet ignores deadlines: a reset unblocks the reads.
	defer context.AfterFunc(ctx, func() { _ = st.Reset() })()
	if !s.post(ctx, input{msg: m, reply: reply}) {
		_ = st.Reset()
		return
	}
	var answer *Message
	select {
	case answer = <-reply:
	case <-ctx.Done():
	}
	if answer == nil {
		// The model refused the frame (counted by the loop) or said nothing.
		_ = st.Reset()
		return
	}
	n, err := writeMove(st, *answer)
	if err != nil {
		s.drops.Add(dropWrite, 1)
		_ = st.Reset()
		return
	}
	s.stats.Add(statMoveSent, 1)
	s.stats.Add(statMoveBytes, uint64(n))
	awaitClose(st)
}

// sendMove offers the token to m.To and hands the answer to the loop. On
// failure it says nothing: the model gives up after MoveTimeout and keeps
// the token; the target is left out of the model's candidates for a while.
func (s *Selector) sendMove(m Message) {
	to := peer.ID(m.To)
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.Config.MoveTimeout+s.streamTimeout())
	defer cancel()
	fail := func() {
		s.mu.Lock()
		s.unreachable[to] = time.Now().Add(s.opts.Config.DeadAfter)
		s.mu.Unlock()
	}
	st, err := s.node.Host().NewStream(ctx, to, s.ids.move)
	if err != nil {
		fail()
		return
	}
	defer st.Close()
	defer context.AfterFunc(ctx, func() { _ = st.Reset() })()
	_ = st.SetDeadline(time.Now().Add(s.streamTimeout()))
	n, err := writeMove(st, m)
	if err != nil {
		s.drops.Add(dropWrite, 1)
		_ = st.Reset()
		fail()
		return
	}
	s.stats.Add(statMoveSent, 1)
	s.stats.Add(statMoveBytes, uint64(n))
	f, err := readMove(st)
	if err != nil {
		if gone(err) || ctx.Err() != nil {
			s.stats.Add(statMoveLost, 1)
		} else {
			s.drops.Add(dropDecode, 1)
		}
		_ = st.Reset()
		return
	}
	ans, reason, err := decodeMove(f, to, s.node.ID(), pb.MoveFrame_ACK, pb.MoveFrame_REFUSE)
	if err != nil {
		s.drops.Add(reason, 1)
		_ = st.Reset()
		return
	}
	s.post(ctx, input{msg: ans})
}
