package connrtt

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// The sock_diag request and reply (linux/inet_diag.h, linux/tcp.h).
const (
	nlmsgHdrLen     = 16
	diagReqLen      = 56 // struct inet_diag_req_v2
	diagMsgLen      = 72 // struct inet_diag_msg
	inetDiagInfo    = 2  // INET_DIAG_INFO: struct tcp_info
	tcpInfoRTT      = 68 // tcpi_rtt, µs
	tcpInfoMinRTT   = 148
	tcpInfoMinRTTOK = tcpInfoMinRTT + 4
)

var errNoSocket = errors.New("connrtt: no such socket")

// tcpMinRTT asks the kernel for the tcp_info of our socket from local to
// remote: tcpi_min_rtt (kernels ≥ 4.6), else the smoothed tcpi_rtt.
func tcpMinRTT(local, remote *net.TCPAddr) (time.Duration, bool) {
	info, err := tcpInfo(local, remote)
	if err != nil {
		return 0, false
	}
	us := uint32(0)
	if len(info) >= tcpInfoMinRTTOK {
		us = binary.NativeEndian.Uint32(info[tcpInfoMinRTT:])
	}
	if (us == 0 || us == ^uint32(0)) && len(info) >= tcpInfoRTT+4 {
		us = binary.NativeEndian.Uint32(info[tcpInfoRTT:])
	}
	if us == 0 || us == ^uint32(0) {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}

// tcpInfo is the kernel's struct tcp_info of the socket, as many bytes as
// this kernel's struct has.
func tcpInfo(local, remote *net.TCPAddr) ([]byte, error) {
	family, src, dst := uint8(unix.AF_INET), local.IP.To4(), remote.IP.To4()
	if src == nil || dst == nil {
		family, src, dst = unix.AF_INET6, local.IP.To16(), remote.IP.To16()
		if src == nil || dst == nil {
			return nil, errNoSocket
		}
	}
	req := make([]byte, nlmsgHdrLen+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // seq
	r := req[nlmsgHdrLen:]
	r[0], r[1], r[2] = family, unix.IPPROTO_TCP, 1<<(inetDiagInfo-1)
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	binary.BigEndian.PutUint16(r[8:], uint16(local.Port))
	binary.BigEndian.PutUint16(r[10:], uint16(remote.Port))
	copy(r[12:28], src)
	copy(r[28:44], dst)
	ne.PutUint32(r[48:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(r[52:], ^uint32(0))

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return nil, err
	}
	return parseReply(buf[:n])
}

// parseReply finds INET_DIAG_INFO in a sock_diag reply.
func parseReply(b []byte) ([]byte, error) {
	ne := binary.NativeEndian
	if len(b) < nlmsgHdrLen {
		return nil, errNoSocket
	}
	l, typ := int(ne.Uint32(b[0:])), ne.Uint16(b[4:])
	if typ == unix.NLMSG_ERROR || l > len(b) || l < nlmsgHdrLen+diagMsgLen || typ != unix.SOCK_DIAG_BY_FAMILY {
		return nil, errNoSocket
	}
	attrs := b[nlmsgHdrLen+diagMsgLen : l]
	for len(attrs) >= 4 {
		al, at := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
		if al < 4 || al > len(attrs) {
			break
		}
		if at == inetDiagInfo {
			return attrs[4:al], nil
		}
		attrs = attrs[min(len(attrs), (al+3)&^3):]
	}
	return nil, errNoSocket
}
