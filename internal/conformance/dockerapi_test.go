package conformance_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
)

// TestDockerAPI: a docker run through the daemon's API (the default for
// a run without a terminal or pinfold's network) gives its command the
// container the client's `docker run` gives it: the same ids,
// capabilities, limits, mounts, hostname, environment and directory,
// read from inside, with the limits' cgroup parent; its output, stdin,
// terminal, exit status and tini's report of a command that cannot run come back
// as the client's do, and the container is gone when Wait returns.
func TestDockerAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as root (limits)")
	}
	if dockerErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(dockerErr)
		}
		t.Skip(dockerErr)
	}
	ws := t.TempDir()
	os.WriteFile(ws+"/f", []byte("x"), 0o644)
	store := t.TempDir()
	rt := container.Docker(container.WithStore(store))
	ctx := context.Background()
	spec := sandbox.Spec{Workspace: ws, Access: sandbox.AccessReadOnly, Hostname: "apitest",
		Limits: sandbox.Limits{Memory: 256 << 20, Pids: 64}}
	sb, err := rt.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	// What the command sees of its container; the root's line names the
	// container's own layer, and /proc/self/cgroup the run's own group
	// (under pinfold's, whose name is cut).
	probe := `id; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; ulimit -n; hostname; pwd; env | sort;
awk '$2 != "/" {print $2, $3, $4}' /proc/self/mounts | sed 's/,lowerdir=.*//'; grep -E ':(memory|pids):' /proc/self/cgroup | sed 's,/pinfold/.*,/pinfold/,'; echo err >&2; exit 3`
	run := func(cli bool, args ...string) (string, string, *sandbox.Result, bool) {
		t.Helper()
		if cli {
			t.Setenv("PINFOLD_DOCKER_CLI", "1")
		} else {
			os.Unsetenv("PINFOLD_DOCKER_CLI")
		}
		var out, errs bytes.Buffer
		p, err := sb.Run(ctx, &sandbox.Cmd{Args: args, Env: []string{"A=1", "B=two words"}, Stdout: &out, Stderr: &errs})
		if err != nil {
			t.Fatalf("cli %v: %v", cli, err)
		}
		api := p.(*container.Process).ViaAPI()
		res, err := p.Wait()
		if err != nil {
			t.Fatalf("cli %v: %v (stderr %s)", cli, err, errs.String())
		}
		return out.String(), errs.String(), res, api
	}
	cliOut, cliErr, cliRes, cliAPI := run(true, "sh", "-c", probe)
	apiOut, apiErr, apiRes, apiAPI := run(false, "sh", "-c", probe)
	if cliAPI || !apiAPI {
		t.Fatalf("the runs took the client %v and the API %v: want the client, then the API", !cliAPI, apiAPI)
	}
	// The daemon orders mounts of one depth as it likes: compare sets.
	sorted := func(s string) string {
		l := strings.Split(strings.TrimSpace(s), "\n")
		slices.Sort(l)
		return strings.Join(l, "\n")
	}
	if sorted(apiOut) != sorted(cliOut) {
		t.Errorf("the command saw another container through the API:\n%s\nthrough the client:\n%s", apiOut, cliOut)
	}
	if apiErr != cliErr || apiErr != "err\n" {
		t.Errorf("stderr: API %q, client %q", apiErr, cliErr)
	}
	if apiRes.ExitCode != 3 || cliRes.ExitCode != 3 || apiRes.Reason != cliRes.Reason {
		t.Errorf("exit: API %d %s, client %d %s", apiRes.ExitCode, apiRes.Reason, cliRes.ExitCode, cliRes.Reason)
	}
	if !strings.Contains(apiOut, "uid=1879048192") || !strings.Contains(apiOut, ":memory:/pinfold/\n") || !strings.Contains(apiOut, ":pids:/pinfold/\n") {
		t.Errorf("the probe's output lacks the ids or the limits:\n%s", apiOut)
	}
	// stdin reaches the command, and its end ends the command's.
	var out bytes.Buffer
	p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "cat; echo done"}, Stdin: strings.NewReader("hello\n"), Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 || out.String() != "hello\ndone\n" || !p.(*container.Process).ViaAPI() {
		t.Errorf("stdin through the API: %v %+v, output %q", err, res, out.String())
	}
	// A terminal, of the size asked for.
	out.Reset()
	if p, err = sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "stty size; tty"}, TTY: true, Rows: 30, Cols: 90, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "30 90") || !strings.Contains(out.String(), "/dev/pts/") || !p.(*container.Process).ViaAPI() {
		t.Errorf("a terminal through the API: %v %+v, output %q", err, res, out.String())
	}
	// A command that cannot run is tini's report, as through the client.
	os.Unsetenv("PINFOLD_DOCKER_CLI")
	p, err = sb.Run(ctx, &sandbox.Cmd{Args: []string{"/nonexistent"}})
	if err != nil {
		t.Fatal(err)
	}
	var ee *sandbox.ExecError
	if _, err := p.Wait(); !errors.As(err, &ee) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing command through the API: %v, want a not-found ExecError", err)
	}
	left, err := exec.Command("docker", "ps", "-a", "--filter", "label="+container.Label, "--format", "{{.Names}}").Output()
	if err != nil || strings.TrimSpace(string(left)) != "" {
		t.Errorf("containers left after Wait: %q %v", left, err)
	}

	// The skeleton image removed behind pinfold's back: the daemon's
	// refusal is the engine's error, and the store forgets the image, so
	// that the next run imports it again.
	imgs, _ := exec.Command("docker", "images", "-q", "--filter", "label="+container.Label+"-skeleton=1").Output()
	for _, id := range strings.Fields(string(imgs)) {
		exec.Command("docker", "rmi", "-f", id).Run()
	}
	p, err = sb.Run(ctx, &sandbox.Cmd{Args: []string{"true"}})
	if err == nil {
		_, err = p.Wait()
	}
	if !errors.Is(err, container.ErrEngine) || !strings.Contains(err.Error(), "imports the image again") {
		t.Fatalf("a run whose image is gone: %v", err)
	}
	again, err := container.Docker(container.WithStore(store)).New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if p, err = again.Run(ctx, &sandbox.Cmd{Args: []string{"true"}}); err == nil {
		_, err = p.Wait()
	}
	if err != nil {
		t.Errorf("the run after: %v", err)
	}
}
