package kubehelper

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentBinary checks which binary a cold session's pod gets: an
// executable pinfold-agent beside pinfold, else pinfold itself.
func TestAgentBinary(t *testing.T) {
	dir := t.TempDir()
	pinfold := filepath.Join(dir, "pinfold")
	os.WriteFile(pinfold, []byte("x"), 0o755)
	if got := agentBinary(pinfold); got != pinfold {
		t.Errorf("no pinfold-agent: got %s, want pinfold's binary %s", got, pinfold)
	}
	small := filepath.Join(dir, agentName)
	os.WriteFile(small, []byte("x"), 0o644)
	if got := agentBinary(pinfold); got != pinfold {
		t.Errorf("a pinfold-agent that is not executable: got %s, want %s", got, pinfold)
	}
	os.Chmod(small, 0o755)
	if got := agentBinary(pinfold); got != small {
		t.Errorf("got %s, want %s beside pinfold", got, small)
	}
}

// TestAwaitFile runs awaitFile's shell for real: the command starts only
// once the file exists, and gets its arguments whole.
func TestAwaitFile(t *testing.T) {
	done := filepath.Join(t.TempDir(), "ready")
	args := awaitFile(done, []string{"printf", "%s|", "a b", "$0"})
	cmd := exec.Command(args[0], args[1:]...)
	var out strings.Builder
	cmd.Stdout = &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if out.Len() > 0 {
		t.Fatalf("ran before the file was there: %q", out.String())
	}
	os.WriteFile(done, nil, 0o444)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "a b|$0|" {
		t.Errorf("output %q, want %q", out.String(), "a b|$0|")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestLinksScript runs linksScript for real in a network namespace of
// the test's with a veth link up, which is taken down 0.3 s later: the
// script waits for it (in one run, not a poll from outside) and lists
// every link down.
func TestLinksScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace with a veth pair)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no ip (iproute2)")
		}
		t.Skip("no ip")
	}
	start := time.Now()
	out, err := exec.Command("unshare", "-n", "-m", "sh", "-c",
		`mount -t sysfs none /sys && ip link add name va type veth peer name vb && ip link set va up || exit 9; (sleep 0.3; ip link set va down) & exec sh -c "$0"`, linksScript).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	d := time.Since(start)
	links := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, flags, _ := strings.Cut(l, " ")
		links[name] = flags
	}
	if len(links) != 3 || links["lo"] == "" || links["va"] == "" || links["vb"] == "" {
		t.Fatalf("listed %q", out)
	}
	for name, flags := range links {
		if name != "lo" && (strings.HasSuffix(flags, "1") || strings.HasSuffix(flags, "3")) {
			t.Errorf("link %s listed up: %s", name, flags)
		}
	}
	if d < 300*time.Millisecond || d > 20*time.Second {
		t.Errorf("the script ended after %s: it did not wait for the link (0.3 s)", d)
	}
}
