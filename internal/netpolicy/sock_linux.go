package netpolicy

import (
	"context"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Host sockets are plain descriptors wrapped in os.File, which puts them on
// Go's poller: the package avoids package net, whose initialisation every
// pinfold start would pay.

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
}

func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// socket makes a non-blocking socket for dst's family.
func socket(dst netip.Addr, typ, proto int) (int, error) {
	return unix.Socket(family(dst), typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
}

// dialTCP connects to dst from the host and returns the connected socket.
func dialTCP(ctx context.Context, dst netip.AddrPort) (*os.File, error) {
	fd, err := socket(dst.Addr(), unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	err = unix.Connect(fd, sockaddr(dst))
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tcp")
	if err == nil {
		return f, nil
	}
	if d, ok := ctx.Deadline(); ok {
		f.SetWriteDeadline(d)
	}
	stop := cancelIO(ctx, f)
	rc, err := f.SyscallConn()
	if err != nil {
		stop()
		f.Close()
		return nil, err
	}
	// Ask the socket each time rather than trusting one wake-up: the
	// connection may have completed before the poller was armed.
	var cerr error
	werr := rc.Write(func(fd uintptr) bool {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
		case v != 0:
			cerr = unix.Errno(v)
		default:
			if _, err := unix.Getpeername(int(fd)); err == unix.ENOTCONN {
				return false // still connecting
			}
		}
		return true
	})
	if !stop() && werr == nil {
		werr = ctx.Err() // ended anyway: its deadline may yet land on f
	}
	f.SetWriteDeadline(time.Time{})
	if werr != nil {
		cerr = werr
	}
	if cerr != nil {
		f.Close()
		return nil, cerr
	}
	return f, nil
}

// cancelIO makes f's pending and later reads and writes fail once ctx is
// done (the descriptor's deadline is what wakes a blocked wait); stop
// undoes it.
func cancelIO(ctx context.Context, f *os.File) (stop func() bool) {
	return context.AfterFunc(ctx, func() { f.SetDeadline(time.Unix(1, 0)) })
}

// closeWrite half-closes a connected socket.
func closeWrite(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
}

// listenTCP listens on addr.
func listenTCP(addr netip.AddrPort) (*os.File, error) {
	fd, err := socket(addr.Addr(), unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, err
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if addr.Addr().Is6() {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Listen(fd, 128); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "listener"), nil
}

// accept waits for the next connection on l.
func accept(l *os.File) (*os.File, netip.AddrPort, error) {
	rc, err := l.SyscallConn()
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	var nfd int
	var sa unix.Sockaddr
	var aerr error
	err = rc.Read(func(fd uintptr) bool {
		nfd, sa, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return aerr != unix.EAGAIN
	})
	if err == nil {
		err = aerr
	}
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	return os.NewFile(uintptr(nfd), "tcp"), addrPortOf(sa), nil
}

// dialUDP returns a UDP (or ICMP echo) socket connected to dst.
func dialDgram(dst netip.AddrPort, proto int) (*os.File, error) {
	fd, err := socket(dst.Addr(), unix.SOCK_DGRAM, proto)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, sockaddr(dst)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "udp"), nil
}
