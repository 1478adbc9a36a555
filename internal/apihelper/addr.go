package apihelper

import (
	"net"
	"strconv"
)

// listenURL is the address to print for a TCP listener asked for as
// asked: the host as asked (0.0.0.0 stays 0.0.0.0, where the listener,
// dual-stack, calls itself [::]) and the port it got (for port 0).
func listenURL(asked string, got net.Addr) string {
	host, _, err := net.SplitHostPort(asked)
	ta, ok := got.(*net.TCPAddr)
	if err != nil || !ok {
		return "http://" + got.String()
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(ta.Port))
}
