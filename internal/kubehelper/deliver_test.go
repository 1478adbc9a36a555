package kubehelper

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/internal/kube"
)

// TestUnpackScript runs main's unpack for real in a directory standing
// for the stage: the agent assembled from its parts and made executable,
// the workspace unpacked with its modes, the marker written last; a part
// that is not the agent's, or a workspace tar that is not pinfold's, ends
// it with 97 and its reason, and no marker.
func TestUnpackScript(t *testing.T) {
	agent := bytes.Repeat([]byte("#!/bin/sh\n# agent\n"), 1000)
	sum := sha512.Sum512(agent)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("x"), 0o750)
	var tarb bytes.Buffer
	if err := kube.WriteTar(&tarb, []kube.Dir{{Src: src, Name: "ws"}}); err != nil {
		t.Fatal(err)
	}
	wsSum := sha512.Sum512(tarb.Bytes())
	run := func(t *testing.T, agentSum, tarSum string, parts ...[]byte) (string, string, error) {
		root := t.TempDir()
		for _, d := range []string{"agent", "in", "ws"} {
			os.Mkdir(filepath.Join(root, d), 0o755)
		}
		os.WriteFile(filepath.Join(root, "in", "ws"), tarb.Bytes(), 0o444)
		args := []string{"-c", strings.Replace(unpackScript(root), "exec sleep 2147483647", "exit 0", 1), agentSum, tarSum, "pinfold-agent-x", strconv.Itoa(len(parts))}
		for i, p := range parts {
			f := filepath.Join(root, "in", "a"+string(rune('0'+i)))
			os.WriteFile(f, p, 0o444)
			args = append(args, f)
		}
		var errb strings.Builder
		cmd := exec.Command("/bin/sh", args...)
		cmd.Stderr = &errb
		err := cmd.Run()
		return root, errb.String(), err
	}
	good := hex.EncodeToString(sum[:])
	root, msg, err := run(t, good, hex.EncodeToString(wsSum[:]), agent[:5000], agent[5000:])
	if err != nil {
		t.Fatalf("%v: %s", err, msg)
	}
	fi, err := os.Stat(filepath.Join(root, "agent", agentFile))
	if b, _ := os.ReadFile(filepath.Join(root, "agent", agentFile)); err != nil || !bytes.Equal(b, agent) || fi.Mode().Perm() != 0o755 {
		t.Errorf("the agent: %v %v", err, fi)
	}
	if fi, err := os.Stat(filepath.Join(root, "ws", "run.sh")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("the workspace: %v %v", err, fi)
	}
	if _, err := os.Stat(filepath.Join(root, "agent", agentDone)); err != nil {
		t.Errorf("no marker: %v", err)
	}
	bad := append([]byte(nil), agent...)
	bad[10] ^= 1
	for name, c := range map[string]struct {
		sum, ws, want string
		parts         [][]byte
	}{
		"tampered agent":     {good, "", "is not pinfold's", [][]byte{bad}},
		"a part missing":     {good, "", "is not pinfold's", [][]byte{agent[:5000]}},
		"tampered workspace": {good, strings.Repeat("0", 128), "workspace's configmap is not", [][]byte{agent}},
	} {
		t.Run(name, func(t *testing.T) {
			root, msg, err := run(t, c.sum, c.ws, c.parts...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 97 || !strings.Contains(msg, c.want) {
				t.Errorf("%v: %q", err, msg)
			}
			if _, err := os.Stat(filepath.Join(root, "agent", agentDone)); err == nil {
				t.Error("the marker was written")
			}
		})
	}
}

// TestCappedBuffer: a workspace over the bound is refused whole.
func TestCappedBuffer(t *testing.T) {
	b := &cappedBuffer{max: 10}
	if _, err := b.Write(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(make([]byte, 3)); !errors.Is(err, errTooBig) {
		t.Errorf("over the bound: %v", err)
	}
}
