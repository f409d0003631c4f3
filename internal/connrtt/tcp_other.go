//go:build !linux

package connrtt

import (
	"net"
	"time"
)

// tcpMinRTT: the kernel's TCP RTT is read on Linux only.
func tcpMinRTT(local, remote *net.TCPAddr) (time.Duration, bool) { return 0, false }
