// Command netclient runs inside sandboxes in the network tests. It uses
// no proxy variables: what it reaches, it reaches through the network
// itself. Each command prints one JSON line: {"err": "...", "out": "..."}.
//
//	netclient resolve NAME            addresses of NAME (pure Go resolver, /etc/resolv.conf)
//	netclient tcp HOST:PORT           connect, send "ping\n", read one line
//	netclient http HOST:PORT HOSTHDR  send an HTTP/1.0 GET with that Host, read the status line
//	netclient udp HOST:PORT           send "ping", read one datagram
//	netclient dns SERVER:PORT NAME    ask SERVER for NAME's A record directly
//	netclient serve PORT              accept one connection, answer each line with "echo LINE"
//	netclient sink HOST:PORT MB       send MB MiB, print the MiB/s
//	netclient raw HOST:PORT DATA      send DATA (a Go-quoted string), print what comes back until the server closes
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	out, err := run(os.Args[1:])
	r := map[string]string{"out": out, "err": ""}
	if err != nil {
		r["err"] = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

func run(args []string) (string, error) {
	if c, ok := commands[args[0]]; ok {
		return c(args)
	}
	return "", fmt.Errorf("unknown command %q", args[0])
}

// commands are netclient's commands by name; each gets its arguments
// with the name first.
var commands = map[string]func(args []string) (string, error){
	"resolve": resolve, "tcp": tcpPing, "http": httpHead, "udp": udpPing, "dns": dnsQuery,
	"serve": serve, "raw": raw, "sink": sink,
}

var dialer = net.Dialer{Timeout: 5 * time.Second}

// resolve NAME: the addresses the resolver gives.
func resolve(args []string) (string, error) {
	r := &net.Resolver{PreferGo: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, args[1])
	return strings.Join(addrs, ","), err
}

// tcp ADDR: the echo server's answer to a ping.
func tcpPing(args []string) (string, error) {
	c, err := dialer.Dial("tcp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "ping\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// http ADDR HOST: the status line of GET / with that Host.
func httpHead(args []string) (string, error) {
	c, err := dialer.Dial("tcp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", args[2])
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// udp ADDR: the answer to a ping datagram.
func udpPing(args []string) (string, error) {
	c, err := dialer.Dial("udp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	return string(b[:n]), err
}

// dns ADDR NAME: the rcode and answer count of an A query sent straight
// to ADDR.
func dnsQuery(args []string) (string, error) {
	c, err := dialer.Dial("udp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(args[2], ".") {
		q = append(append(q, byte(len(l))), l...)
	}
	q = append(q, 0, 0, 1, 0, 1)
	if _, err := c.Write(q); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		return "", err
	}
	return "rcode " + strconv.Itoa(int(b[3]&0xf)) + " answers " + strconv.Itoa(int(binary.BigEndian.Uint16(b[6:]))) + " bytes " + strconv.Itoa(n), nil
}

// serve PORT: echoes the lines of one connection, then says how many.
func serve(args []string) (string, error) {
	l, err := net.Listen("tcp", ":"+args[1])
	if err != nil {
		return "", err
	}
	c, err := l.Accept()
	if err != nil {
		return "", err
	}
	defer c.Close()
	sc := bufio.NewScanner(c)
	n := 0
	for sc.Scan() {
		fmt.Fprintf(c, "echo %s\n", sc.Text())
		n++
	}
	return strconv.Itoa(n), nil
}

// raw ADDR QUOTED: sends the (Go-quoted) bytes and returns all it reads.
func raw(args []string) (string, error) {
	data, err := strconv.Unquote(args[2])
	if err != nil {
		return "", err
	}
	c, err := dialer.Dial("tcp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(data)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// sink ADDR MB: sends MB MiB and returns the rate and the server's count.
func sink(args []string) (string, error) {
	mb, _ := strconv.Atoi(args[2])
	c, err := dialer.Dial("tcp", args[1])
	if err != nil {
		return "", err
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for range mb {
		if _, err := c.Write(buf); err != nil {
			return "", err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	b := make([]byte, 64)
	n, _ := c.Read(b) // the server's byte count once it has everything
	el := time.Since(start)
	return fmt.Sprintf("%.1f %s", float64(mb)/el.Seconds(), strings.TrimSpace(string(b[:n]))), nil
}
