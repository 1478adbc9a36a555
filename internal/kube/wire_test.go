package kube

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// Every field of the messages survives the wire.
func TestWireRoundTrip(t *testing.T) {
	for _, v := range []any{
		&Request{ID: "id", Owner: "1-2", Host: "h", Kubeconfig: "/k", Namespace: "ns", Image: "alpine", PullPolicy: "Never",
			Hostname: "sb", UID: 1000, GID: 1000, Args: []string{"sh", "-c", "echo \"\n\""}, Env: []string{"A=\x01"}, Dir: "/w",
			Stdin: true, TTY: true, Rows: 24, Cols: 80, TimeoutMS: 5, StartTimeoutMS: 6, Memory: 7, CPUs: 0.25, TmpSize: 8,
			NetworkNone: true, NetworkAllow: true, Egress: []Block{{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}},
			Hosts: []Host{{Name: "example.com", Addrs: []string{"192.0.2.1"}}}, Workspace: "/w", WorkspaceParent: true,
			Access: "changeset", Upper: "/u", Mounts: []Mount{{Source: "/s", Target: "/t", ReadOnly: true, File: true}},
			Session: &Session{Agent: "/a", Env: []string{"X=1"}, Sock: "/s.sock", Pool: "p", PoolSock: "/p.sock", AgentImage: "img:1"}},
		&Control{Signal: 2, Rows: 50, Cols: 132},
		&Event{Started: true, Pod: "p", Exit: &Exit{Code: 137, OOM: true, TimedOut: true, Changes: 3}, Error: "e", Kind: ErrCluster,
			Trace: []Step{{Step: "s", Mono: 9}}},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		line, err := ReadLine(bufio.NewReaderSize(bytes.NewReader(append(b, '\n')), 16))
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := json.Unmarshal(line, back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, v) {
			t.Errorf("%T: got %+v, want %+v", v, back, v)
		}
	}
}

func TestReadLineBound(t *testing.T) {
	long := strings.Repeat("a", MaxLine) + "\n" // one byte over, with its newline
	if _, err := ReadLine(bufio.NewReader(strings.NewReader(long))); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("a line over MaxLine: %v", err)
	}
	r := bufio.NewReader(strings.NewReader(long[1:] + "{}"))
	if line, err := ReadLine(r); err != nil || len(line) != MaxLine {
		t.Errorf("a line of MaxLine: %d %v", len(line), err)
	}
	if line, err := ReadLine(r); err != io.EOF || string(line) != "{}" {
		t.Errorf("the last line, unterminated: %q %v", line, err)
	}
}

// FuzzWire: whatever the peer sends reads as lines no longer than
// MaxLine, and each message decoded from one encodes to a line that
// decodes to the same message.
func FuzzWire(f *testing.F) {
	f.Add([]byte(`{"id":"x","owner":"1-2","host":"h","image":"alpine","uid":0,"gid":0,"args":["true"],"env":null,"dir":"/","tmp_size":0,` +
		`"egress":[{"cidr":"0.0.0.0/0","except":["10.0.0.0/8"]}],"mounts":[{"source":"/a","target":"/b","ro":true}],"session":{"agent":"/p","env":[],"sock":"/s"}}` + "\n" +
		`{"signal":15}` + "\n" + `{"rows":24,"cols":80}` + "\n"))
	f.Add([]byte(`{"started":true,"pod":"p"}` + "\n" + `{"exit":{"code":0,"changes":2},"trace":[{"step":"a","mono":1}]}` + "\n" + `{"error":"x","kind":"spec"}`))
	f.Add([]byte("{\"cpus\":1e400}\n{\"rows\":-1}\n\n\xff\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		for {
			line, err := ReadLine(r)
			if len(line) > MaxLine {
				t.Fatalf("a line of %d bytes", len(line))
			}
			for _, v := range []any{&Request{}, &Control{}, &Event{}} {
				if json.Unmarshal(line, v) != nil {
					continue
				}
				enc, err := json.Marshal(v)
				if err != nil {
					t.Fatalf("%T %+v does not encode: %v", v, v, err)
				}
				back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
				if err := json.Unmarshal(enc, back); err != nil {
					t.Fatalf("%T: %s does not decode: %v", v, enc, err)
				}
				if again, _ := json.Marshal(back); !bytes.Equal(again, enc) {
					t.Fatalf("%T: %s came back as %s", v, enc, again)
				}
			}
			if err != nil {
				return
			}
		}
	})
}
