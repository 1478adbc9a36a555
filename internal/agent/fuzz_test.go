package agent

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
)

// FuzzRequest: any first line from a client decodes or is refused without
// panicking, and what decodes survives encoding unchanged.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"op":"exec","args":["sh","-c","true"],"env":["A=b"],"dir":"/tmp","tty":true,"rows":24,"cols":80,"stdin":true}` + "\n",
		`{"op":"write","path":"/home/sandbox/../../etc/passwd","mode":2541}` + "\n",
		`{"op":"remove","path":"/","recursive":true}` + "\n",
		`{"op":"connect","port":-1}` + "\n",
		`{"op":"ping"}`, "\n", "{\"op\":\"\xff\"}\n", `{"rows":70000}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := readRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		if len(b) > maxRequest+1 && bytes.IndexByte(b[:maxRequest+1], '\n') < 0 {
			t.Fatalf("a line over %d bytes was accepted", maxRequest)
		}
		var w bytes.Buffer
		if err := writeRequest(&w, req); err != nil {
			t.Fatal(err)
		}
		again, err := readRequest(bufio.NewReader(&w))
		if err != nil {
			t.Fatalf("re-reading %q: %v", w.String(), err)
		}
		// Empty lists are left out (omitempty): they come back as none.
		for _, r := range []*Request{req, again} {
			if len(r.Args) == 0 {
				r.Args = nil
			}
			if len(r.Env) == 0 {
				r.Env = nil
			}
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("round trip changed %+v to %+v", req, again)
		}
	})
}

// FuzzFrames: a stream of arbitrary bytes reads as frames no larger than
// maxFrame, or an error, and the frames read write back to the same bytes.
func FuzzFrames(f *testing.F) {
	f.Add([]byte("o\x00\x00\x00\x05hellox\x00\x00\x00\x0b{\"code\":0}\n"))
	f.Add([]byte("i\xff\xff\xff\xff"))
	f.Add([]byte("s\x00\x00\x00\x01\x0fr\x00\x00\x00\x04\x00\x18\x00\x50I\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		var out bytes.Buffer
		fw := &frameWriter{w: &out}
		read := 0
		for {
			typ, p, err := readFrame(r, nil)
			if err != nil {
				break
			}
			if len(p) > maxFrame {
				t.Fatalf("frame of %d bytes", len(p))
			}
			read += 5 + len(p)
			if err := fw.frame(typ, p); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out.Bytes(), b[:read]) {
			t.Fatalf("frames wrote back as %q, read from %q", out.Bytes(), b[:read])
		}
	})
}
