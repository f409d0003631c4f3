package connrtt

import (
	"encoding/binary"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// The sock_diag answer for a socket's four-tuple is that socket's
// tcp_info, as getsockopt(TCP_INFO) on the socket itself reads it.
func TestTCPInfo_MatchesGetsockopt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, ok := <-accepted
	if !ok {
		t.Fatal("no accept")
	}
	defer s.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := s.Read(buf); err != nil {
		t.Fatal(err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var want *unix.TCPInfo
	if err := raw.Control(func(fd uintptr) { want, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || want == nil {
		t.Fatal(err)
	}
	info, err := tcpInfo(c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	if len(info) < tcpInfoMinRTTOK {
		t.Fatalf("tcp_info of %d bytes", len(info))
	}
	ne := binary.NativeEndian
	if got := ne.Uint32(info[tcpInfoMinRTT:]); got != want.Min_rtt || got == 0 {
		t.Errorf("min_rtt %d µs by sock_diag, %d by getsockopt", got, want.Min_rtt)
	}
	if got := ne.Uint32(info[tcpInfoRTT:]); got != want.Rtt {
		t.Errorf("rtt %d µs by sock_diag, %d by getsockopt", got, want.Rtt)
	}
	if info[0] != want.State {
		t.Errorf("state %d by sock_diag, %d by getsockopt", info[0], want.State)
	}
	if _, err := parseReply([]byte{1, 2, 3}); err == nil {
		t.Error("a short reply parsed")
	}
	// Another four-tuple is no socket.
	other := *c.RemoteAddr().(*net.TCPAddr)
	other.Port++
	if _, err := tcpInfo(c.LocalAddr().(*net.TCPAddr), &other); err == nil {
		t.Error("a four-tuple of no socket answered")
	}
}

// parseReply takes whatever the kernel sends without panicking, and
// returns attributes only from within the message.
func FuzzParseReply(f *testing.F) {
	f.Add([]byte{})
	msg := make([]byte, nlmsgHdrLen+diagMsgLen+8)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(msg[nlmsgHdrLen+diagMsgLen:], 8)
	binary.NativeEndian.PutUint16(msg[nlmsgHdrLen+diagMsgLen+2:], inetDiagInfo)
	f.Add(msg)
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseReply(b)
		if err == nil && len(info) > len(b) {
			t.Fatalf("%d bytes of info from a %d-byte reply", len(info), len(b))
		}
	})
}
