// Command client runs inside the sandboxes of bench/network. It talks to
// the bench's servers and prints one JSON line with what it measured.
//
//	client up HOST:PORT BYTES     send the count and BYTES, read the sink's count
//	client down HOST:PORT BYTES   ask the source for BYTES, read them
//	client rtt HOST:PORT N        N times: connect, send 1 byte, read it back, close
//	client hold HOST:PORT BYTES   ask the source for BYTES, read them, print
//	                              "held", keep the connection until stdin ends
//
// Transfers are framed by an 8-byte count rather than ended by a
// half-close, so that they do not depend on how a network forwards FIN.
package main

import (
	"bufio"
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

// result is what the client prints: the bytes moved and the time it took
// (up, down), or each round trip in nanoseconds (rtt).
type result struct {
	Bytes int64   `json:"bytes,omitempty"`
	Nanos int64   `json:"nanos,omitempty"`
	RTTs  []int64 `json:"rtts,omitempty"`
	Err   string  `json:"err,omitempty"`
}

func main() {
	r, err := run(os.Args[1:])
	if err != nil {
		r.Err = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(r)
	if err != nil {
		os.Exit(1)
	}
}

func run(args []string) (result, error) {
	if len(args) != 3 {
		return result{}, fmt.Errorf("usage: client up|down|rtt HOST:PORT N")
	}
	n, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return result{}, err
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	switch args[0] {
	case "up":
		start := time.Now()
		c, err := d.Dial("tcp", args[1])
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		if err := binary.Write(c, binary.BigEndian, n); err != nil {
			return result{}, err
		}
		buf := make([]byte, 1<<20)
		for left := n; left > 0; {
			b := buf[:min(left, int64(len(buf)))]
			if _, err := c.Write(b); err != nil {
				return result{}, err
			}
			left -= int64(len(b))
		}
		reply, err := bufio.NewReader(c).ReadString('\n') // the sink's count, once it has everything
		if err != nil {
			return result{}, err
		}
		el := time.Since(start)
		if got, err := strconv.ParseInt(strings.TrimSpace(reply), 10, 64); err != nil || got != n {
			return result{}, fmt.Errorf("the sink got %q bytes, sent %d", reply, n)
		}
		return result{Bytes: n, Nanos: el.Nanoseconds()}, nil
	case "down":
		start := time.Now()
		c, err := d.Dial("tcp", args[1])
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		if err := binary.Write(c, binary.BigEndian, n); err != nil {
			return result{}, err
		}
		buf := make([]byte, 1<<20)
		for left := n; left > 0; {
			k, err := c.Read(buf[:min(left, int64(len(buf)))])
			if err != nil {
				return result{}, fmt.Errorf("after %d of %d bytes: %v", n-left, n, err)
			}
			left -= int64(k)
		}
		el := time.Since(start)
		return result{Bytes: n, Nanos: el.Nanoseconds()}, nil
	case "hold":
		c, err := d.Dial("tcp", args[1])
		if err != nil {
			return result{}, err
		}
		defer c.Close()
		if err := binary.Write(c, binary.BigEndian, n); err != nil {
			return result{}, err
		}
		if _, err := io.CopyN(io.Discard, c, n); err != nil {
			return result{}, err
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		return result{Bytes: n}, nil
	case "rtt":
		r := result{RTTs: make([]int64, 0, n)}
		b := []byte{'x'}
		for range n {
			start := time.Now()
			c, err := d.Dial("tcp", args[1])
			if err != nil {
				return result{}, err
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(b); err != nil {
				c.Close()
				return result{}, err
			}
			if _, err := io.ReadFull(c, b); err != nil {
				c.Close()
				return result{}, err
			}
			r.RTTs = append(r.RTTs, time.Since(start).Nanoseconds())
			c.Close()
		}
		return r, nil
	}
	return result{}, fmt.Errorf("unknown command %q", args[0])
}
