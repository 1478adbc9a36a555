package container

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestRunFlags: the flags pinfold builds become the create request's
// fields; any other flag sends the run to the client.
func TestRunFlags(t *testing.T) {
	args := []string{"--name", "pinfold-ab", "--label", Label + "=1-2", "--sig-proxy=false", "--ulimit", "nofile=20000:20000",
		"--rm", "--cgroup-parent", "/pinfold/x", "-v", "/usr:/usr:ro", "--read-only", "--cap-drop", "ALL", "--cap-add", "NET_RAW",
		"--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,exec,size=10,mode=1777", "--network", "none", "--hostname", "h",
		"--user", "5:5", "--entrypoint", "/.pinfold/tini", "-w", "/ws"}
	name, b, ok := runFlags(args)
	if !ok || name != "pinfold-ab" {
		t.Fatalf("runFlags refused pinfold's own flags (%v, %q)", ok, name)
	}
	want := createBody{Entrypoint: []string{"/.pinfold/tini"}, WorkingDir: "/ws", User: "5:5", Hostname: "h",
		Labels: map[string]string{Label: "1-2"}, AttachStdout: true, AttachStderr: true,
		HostConfig: hostConfig{Binds: []string{"/usr:/usr:ro"}, Tmpfs: map[string]string{"/tmp": "rw,exec,size=10,mode=1777"},
			ReadonlyRootfs: true, CapDrop: []string{"ALL"}, CapAdd: []string{"NET_RAW"}, SecurityOpt: []string{"no-new-privileges"},
			NetworkMode: "none", CgroupParent: "/pinfold/x", Ulimits: []ulimit{{"nofile", 20000, 20000}}, AutoRemove: true}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("runFlags:\n got %+v\nwant %+v", b, want)
	}
	for _, extra := range [][]string{{"--mount", "type=volume"}, {"--runtime", "runc"}, {"-i"}, {"--uidmap", "0:1:2"}, {"--ulimit", "nofile=x"}, {"-w"}} {
		if _, _, ok := runFlags(append(append([]string(nil), args...), extra...)); ok {
			t.Errorf("runFlags took %q", extra)
		}
	}
}

// TestChunkReader reads a chunked body, extensions and all.
func TestChunkReader(t *testing.T) {
	in := "5\r\nhello\r\n1;x=y\r\n \r\n6\r\nworld!\r\n0\r\n\r\n"
	b, err := io.ReadAll(&chunkReader{r: bufio.NewReaderSize(strings.NewReader(in), 16)})
	if err != nil || string(b) != "hello world!" {
		t.Errorf("chunkReader: %q %v", b, err)
	}
}

// TestDemux splits docker's multiplexed stream, frames of any size, to
// stdout and stderr.
func TestDemux(t *testing.T) {
	var in bytes.Buffer
	frame := func(stream byte, s string) {
		h := [8]byte{stream}
		binary.BigEndian.PutUint32(h[4:], uint32(len(s)))
		in.Write(h[:])
		in.WriteString(s)
	}
	big := strings.Repeat("b", 100<<10)
	frame(1, "out1 ")
	frame(2, "err1")
	frame(1, big)
	var out, errs bytes.Buffer
	if err := demux(&in, &out, &errs); err != nil || out.String() != "out1 "+big || errs.String() != "err1" {
		t.Errorf("demux: %v, stdout %d bytes, stderr %q", err, out.Len(), errs.String())
	}
	// A stream cut inside a frame is an error, not a silent end.
	frame(1, "cut")
	if err := demux(bytes.NewReader(in.Bytes()[:in.Len()-1]), io.Discard, io.Discard); err == nil {
		t.Error("demux of a cut frame: no error")
	}
}

func TestChunkReaderRefusesNegativeSizes(t *testing.T) {
	_, err := io.ReadAll(&chunkReader{r: bufio.NewReader(strings.NewReader("-5\r\nhello\r\n0\r\n\r\n"))})
	if err == nil {
		t.Error("a negative chunk size was read")
	}
}

// TestContextPicksTheClient: a docker context other than the default
// names a daemon this path does not know, so the client runs it.
func TestContextPicksTheClient(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_CONTEXT", "")
	t.Setenv("DOCKER_CONFIG", dir)
	if _, err := daemonSocket(); err != nil {
		t.Fatalf("no config: %v", err)
	}
	for cfg, want := range map[string]bool{
		`{"currentContext":"rootless"}`: false,
		`{"currentContext":"default"}`:  true,
		`{"auths":{}}`:                  true,
		`{not json`:                     false,
	} {
		os.WriteFile(dir+"/config.json", []byte(cfg), 0o600)
		if _, err := daemonSocket(); (err == nil) != want {
			t.Errorf("%s: %v", cfg, err)
		}
	}
	os.Remove(dir + "/config.json")
	t.Setenv("DOCKER_CONTEXT", "remote")
	if _, err := daemonSocket(); err == nil {
		t.Error("DOCKER_CONTEXT=remote went to the default socket")
	}
}
