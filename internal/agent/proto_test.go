package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// Frames of any size arrive as they were sent, cut at maxFrame.
func TestFrameRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, maxFrame - 1, maxFrame, maxFrame + 1, 2*maxFrame + 7} {
		var b bytes.Buffer
		fw := &frameWriter{w: &b}
		payload := bytes.Repeat([]byte{'z'}, n)
		if err := fw.frame(FrameStdout, payload); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(&b)
		var got []byte
		frames := 0
		for b.Len() > 0 || r.Buffered() > 0 {
			typ, p, err := readFrame(r, nil)
			if err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if typ != FrameStdout || len(p) > maxFrame {
				t.Fatalf("%d bytes: frame %q of %d", n, typ, len(p))
			}
			got = append(got, p...)
			frames++
		}
		if !bytes.Equal(got, payload) {
			t.Errorf("%d bytes: got %d back", n, len(got))
		}
		if want := max(1, (n+maxFrame-1)/maxFrame); frames != want {
			t.Errorf("%d bytes in %d frames, want %d", n, frames, want)
		}
	}
}

// A frame header claiming more than maxFrame is refused before anything
// is allocated for it.
func TestFrameTooLarge(t *testing.T) {
	var h [5]byte
	h[0] = FrameStdin
	binary.BigEndian.PutUint32(h[1:], maxFrame+1)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(h[:])), nil); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized frame: %v", err)
	}
	binary.BigEndian.PutUint32(h[1:], 10)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(append(h[:], "short"...))), nil); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestRequestRoundTrip(t *testing.T) {
	req := &Request{Op: "exec", Args: []string{"sh", "-c", "echo \"$X\"\n"}, Env: []string{"X=a\x00b"}, Clearenv: true,
		Dir: "/tmp/a b", TTY: true, Rows: 40, Cols: 120, Stdin: true, Path: "/x\ny", Mode: 0o4755, Recursive: true, Port: 8080}
	var b bytes.Buffer
	if err := writeRequest(&b, req); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b.Bytes(), []byte{'\n'}) != 1 {
		t.Fatalf("request is not one line: %q", b.String())
	}
	got, err := readRequest(bufio.NewReaderSize(&b, 16)) // lines longer than the buffer
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Errorf("got %+v, want %+v", got, req)
	}
}

func TestRequestTooLong(t *testing.T) {
	line := `{"op":"exec","args":["` + strings.Repeat("a", maxRequest) + `"]}` + "\n"
	if _, err := readRequest(bufio.NewReader(strings.NewReader(line))); err == nil {
		t.Error("request over maxRequest accepted")
	}
	for _, bad := range []string{"", "\n", "{", "[]\n", `{"op":1}` + "\n", "null"} {
		if _, err := readRequest(bufio.NewReader(strings.NewReader(bad))); err == nil && bad != "null" {
			t.Errorf("%q accepted", bad)
		}
	}
}
