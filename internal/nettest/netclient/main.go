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
	d := net.Dialer{Timeout: 5 * time.Second}
	switch args[0] {
	case "resolve":
		r := &net.Resolver{PreferGo: true}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(ctx, args[1])
		return strings.Join(addrs, ","), err
	case "tcp":
		c, err := d.Dial("tcp", args[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, "ping\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	case "http":
		c, err := d.Dial("tcp", args[1])
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", args[2])
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	case "udp":
		c, err := d.Dial("udp", args[1])
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
	case "dns":
		c, err := d.Dial("udp", args[1])
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
	case "serve":
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
	case "raw":
		data, err := strconv.Unquote(args[2])
		if err != nil {
			return "", err
		}
		c, err := d.Dial("tcp", args[1])
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
	case "sink":
		mb, _ := strconv.Atoi(args[2])
		c, err := d.Dial("tcp", args[1])
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
	return "", fmt.Errorf("unknown command %q", args[0])
}
