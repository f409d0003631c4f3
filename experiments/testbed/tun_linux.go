package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// routerSysctls make the router namespace forward between the bridge and
// the TUN device: no reverse-path check (a packet written back to the TUN
// device comes from an address routed through the bridge) and no redirects.
// (The check applies the larger of "all" and the device's own value.)
var routerSysctls = [][2]string{
	{"net/ipv4/ip_forward", "1"},
	{"net/ipv4/conf/all/rp_filter", "0"},
	{"net/ipv4/conf/default/rp_filter", "0"},
	{"net/ipv4/conf/" + InnerDev + "/rp_filter", "0"},
	{"net/ipv4/conf/all/send_redirects", "0"},
}

// onThreadIn runs f on an OS thread of its own that has entered network
// namespace netns, and is never handed back to the runtime (the goroutine
// ends locked, so the thread exits).
func onThreadIn(netns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread leaves the root namespace
		ch <- func() error {
			ns, err := os.Open(filepath.Join("/run/netns", netns))
			if err != nil {
				return err
			}
			defer ns.Close()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns %s: %w", netns, err)
			}
			return f()
		}()
	}()
	return <-ch
}

// writeSysctls sets sysctls (paths under /proc/sys) in the namespace of the
// calling thread: /proc/sys/net is the namespace of the thread that opens
// it.
func writeSysctls(netns string, kvs [][2]string) error {
	for _, kv := range kvs {
		if err := os.WriteFile(filepath.Join("/proc/sys", kv[0]), []byte(kv[1]), 0o644); err != nil {
			return fmt.Errorf("sysctl %s in %s: %w", kv[0], netns, err)
		}
	}
	return nil
}

// setSysctlsIn sets sysctls (paths under /proc/sys) in namespace netns.
func setSysctlsIn(netns string, kvs [][2]string) error {
	return onThreadIn(netns, func() error { return writeSysctls(netns, kvs) })
}

// openTUNIn sets the router namespace's sysctls and opens a TUN device
// (IFF_TUN | IFF_NO_PI) named name inside it. The device lives in the
// namespace, is read and written through the returned file from any
// thread, and goes away when the file is closed.
func openTUNIn(netns, name string) (*os.File, error) {
	var f *os.File
	err := onThreadIn(netns, func() error {
		if err := writeSysctls(netns, routerSysctls); err != nil {
			return err
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("/dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
		return nil
	})
	return f, err
}
