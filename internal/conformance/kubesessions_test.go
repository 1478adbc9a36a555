package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/client"
	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
)

// kubeServeHTTP serves /tmp/www on the pod's 127.0.0.1:8766 with busybox's
// httpd (which puts itself in the background) and waits until it answers
// a request (the kit's busybox nc has no -z), failing if it never does.
const kubeServeHTTP = `mkdir -p /tmp/www && echo a > /tmp/www/a && httpd -p 127.0.0.1:8766 -h /tmp/www || exit 1
for i in $(seq 100); do printf 'GET /a HTTP/1.0\r\n\r\n' | nc -w 1 127.0.0.1 8766 2>/dev/null | grep -q ' 200 ' && exit 0; sleep 0.05; done
echo httpd does not answer on 127.0.0.1:8766 >&2; exit 1`

// kubeSessions runs the session scenarios on pods: the library's sessions
// (kubernetes.Runtime as a sandbox.Sessioner), then sessions through
// pinfold serve with a warm pool, and what is left when it is killed.
func kubeSessions(t *testing.T, tg conformance.Target, rt *kubernetes.Runtime, kubectl, kubeconfig, ns string) {
	kc := func(args ...string) string {
		b, _ := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(b))
	}
	t.Setenv("PINFOLD_AGENT", tg.Pinfold)

	t.Run("library", func(t *testing.T) {
		ws := t.TempDir()
		os.Chmod(ws, 0o755)
		spec := sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseOCI, Ref: kubeImage}, Workspace: ws,
			Access: sandbox.AccessChangeset, Changeset: &sandbox.Capture{Upper: t.TempDir(), Work: t.TempDir()},
			Network: sandbox.NetworkNone, Limits: sandbox.Limits{TmpSize: 64 << 20}}
		conformance.Session(t, conformance.SessionTarget{Sessioner: rt, Spec: spec, ServeHTTP: kubeServeHTTP})
	})

	t.Run("serve-pool", func(t *testing.T) {
		store := t.TempDir()
		ws := t.TempDir()
		os.Chmod(ws, 0o755)
		os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
		os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from the host\n"), 0o644)
		trace := filepath.Join(t.TempDir(), "trace")
		env := append(os.Environ(), "PINFOLD_STORE="+store, "PINFOLD_KUBE_TRACE_FILE="+trace)
		serve := exec.Command(tg.Pinfold, "serve", "--kube-pool", "2")
		serve.Env = env
		var log syncBuf
		serve.Stdout, serve.Stderr = &log, &log
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			serve.Process.Signal(syscall.SIGTERM)
			serve.Wait()
		}()
		host, _ := os.Hostname()
		pool := fmt.Sprintf("pinfold.pool=serve-%d-%s", serve.Process.Pid, host)
		sock := filepath.Join(store, "api.sock")
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("no server socket: %s", log.String())
			}
		}
		c, err := client.New("unix://" + sock)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		create := func() (*client.Sandbox, time.Duration) {
			t.Helper()
			start := time.Now()
			sb, err := c.Create(ctx, client.CreateRequest{Workspace: ws, Backend: "kubernetes", Base: "oci:" + kubeImage})
			if err != nil {
				t.Fatalf("create: %v\n%s", err, log.String())
			}
			t.Cleanup(func() {
				// Through the store: the server may be gone.
				stop := exec.Command(tg.Pinfold, "session", "stop", sb.ID)
				stop.Env = env
				stop.Run()
			})
			return sb, time.Since(start)
		}
		ready := func(n int) {
			t.Helper()
			var got string
			for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				got = kc("get", "pods", "-l", pool+",pinfold.ready=1", "-o", "name")
				if got != "" && len(strings.Fields(got)) >= n {
					return
				}
			}
			t.Fatalf("the pool has not %d ready pods: %q\n%s", n, got, log.String())
		}
		// podOf names the pod a session runs in, from inside: the kubelet's
		// directory of the pod's volumes holds its uid.
		podOf := func(id string) string {
			t.Helper()
			res, err := c.Exec(ctx, id, client.ExecRequest{Args: []string{"sh", "-c", `grep -o 'pods/[0-9a-f-]*' /proc/self/mountinfo | head -1`}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %+v %v", res, err)
			}
			return strings.TrimSpace(res.Stdout)
		}

		// The first session of a template starts a pod of its own and
		// tells the keeper, which keeps two ready.
		first, cold := create()
		ready(2)
		// Sessions started together never get the same pod: two warm,
		// one cold.
		var wg sync.WaitGroup
		ids := make([]string, 3)
		times := make([]time.Duration, 3)
		for i := range ids {
			wg.Go(func() {
				sb, d := create()
				ids[i], times[i] = sb.ID, d
			})
		}
		wg.Wait()
		pods := map[string]bool{podOf(first.ID): true}
		for _, id := range ids {
			pods[podOf(id)] = true
		}
		if len(pods) != 4 {
			t.Errorf("4 sessions in %d pods: %v", len(pods), pods)
		}
		claimed := kc("get", "pods", "-l", "pinfold.template,!pinfold.pool", "-o", "name")
		if n := len(strings.Fields(claimed)); n != 2 {
			t.Errorf("%d claimed pods, want 2: %q", n, claimed)
		}
		t.Logf("session start: cold %v; together %v", cold, times)
		// Every session's first connection was an attach to main, the
		// claimed pods' with their workspace (in.txt, below): no exec
		// before a session was ready.
		if b, _ := os.ReadFile(trace); strings.Count(string(b), "agent by attach") != 4 || strings.Count(string(b), "pod claimed") != 2 {
			t.Errorf("4 sessions, 2 of them claimed, each served first by an attach to main; the trace:\n%s", b)
		}
		// The pool refills.
		ready(2)

		// Network none (netoff here): the cold session's pod and a
		// claimed one see every link but loopback down (main's agent
		// answers only then).
		for _, id := range []string{first.ID, ids[0]} {
			res, err := c.Exec(ctx, id, client.ExecRequest{Args: []string{"sh", "-c", `for l in /sys/class/net/*; do [ "${l##*/}" = lo ] || echo "${l##*/} $(cat $l/flags)"; done`}})
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) == "" {
				t.Errorf("links of %s: %+v %v", id, res, err)
				continue
			}
			for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				name, flags, _ := strings.Cut(l, " ")
				if v, err := strconv.ParseUint(strings.TrimPrefix(flags, "0x"), 16, 32); err != nil || v&1 != 0 {
					t.Errorf("session %s: link %s is up (%s)", id, name, flags)
				}
			}
		}

		// A warm session is a session: the workspace, exec, files, ports,
		// the changeset when it stops.
		id := ids[0]
		res, err := c.Exec(ctx, id, client.ExecRequest{Args: []string{"sh", "-c", "cat in.txt; echo out > out.txt; id -u; exit 3"}})
		if err != nil || res.ExitCode != 3 || res.Stdout != "from the host\n65534\n" {
			t.Errorf("exec: %+v %v", res, err)
		}
		if err := c.WriteFile(ctx, id, "/tmp/put", 0o644, strings.NewReader("put")); err != nil {
			t.Error(err)
		}
		var got bytes.Buffer
		if err := c.ReadFile(ctx, id, "/tmp/put", &got); err != nil || got.String() != "put" {
			t.Errorf("files: %q %v", got.String(), err)
		}
		if res, err := c.Exec(ctx, id, client.ExecRequest{Args: []string{"sh", "-c", kubeServeHTTP}}); err != nil || res.ExitCode != 0 {
			t.Errorf("httpd: %+v %v", res, err)
		}
		if p, err := c.Publish(ctx, id, 8766, 0); err != nil {
			t.Errorf("publish: %v", err)
		} else if out := httpGet(t, p.Host, "/a"); !strings.Contains(out, "200 OK") {
			t.Errorf("through the published port: %q", out)
		}
		if _, err := c.Pause(ctx, id); err == nil {
			t.Error("a pod's session was paused")
		}
		sb, err := c.Delete(ctx, id)
		if err != nil || sb.Added != 1 {
			t.Errorf("stop: %+v %v", sb, err)
		}
		// The stopped session's supervisor is reaped: no zombie a session.
		var zombies []string
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if zombies = zombiesOf(serve.Process.Pid); len(zombies) == 0 {
				break
			}
		}
		if len(zombies) > 0 {
			t.Errorf("the server's zombie children after a session stopped: %v", zombies)
		}

		// The server killed: the keeper's stdin ends, it deletes its pods.
		// The sessions (their supervisors) live on.
		serve.Process.Kill()
		serve.Wait()
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			left := kc("get", "pods", "-l", pool, "-o", "name")
			if left == "" {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("the pool's pods 30 s after the server was killed: %s", left)
			}
		}
		res, err = c.Exec(ctx, ids[1], client.ExecRequest{Args: []string{"true"}})
		if err == nil {
			t.Errorf("the server answered after its kill: %+v", res)
		}
		for _, id := range append(ids, first.ID) {
			stop := exec.Command(tg.Pinfold, "session", "stop", id)
			stop.Env = env
			if b, err := stop.CombinedOutput(); err != nil && id != ids[0] {
				t.Errorf("session stop %s: %v %s", id, err, b)
			}
		}
	})

	t.Run("in-cluster", func(t *testing.T) { kubeInCluster(t, tg, kubectl, kubeconfig, ns) })

	t.Run("kill-supervisor", func(t *testing.T) {
		// The session's supervisor killed: its helper sees its socket
		// close and deletes the pod; the session is lost.
		ws := t.TempDir()
		os.Chmod(ws, 0o755)
		os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
		env := append(os.Environ(), "PINFOLD_STORE="+t.TempDir())
		start := exec.Command(tg.Pinfold, "session", "start", "--json", "--backend", "kubernetes", "--base", "oci:"+kubeImage)
		start.Dir, start.Env = ws, env
		out, err := start.Output()
		var rec struct {
			ID  string
			Pid int
		}
		if err != nil || json.Unmarshal(out, &rec) != nil || rec.Pid == 0 {
			t.Fatalf("session start: %v %s", err, out)
		}
		uid := exec.Command(tg.Pinfold, "exec", rec.ID, "--", "sh", "-c", `grep -o 'pods/[0-9a-f-]*' /proc/self/mountinfo | head -1`)
		uid.Env = env
		b, _ := uid.Output()
		pod := strings.TrimPrefix(strings.TrimSpace(string(b)), "pods/")
		if pod == "" || !strings.Contains(kc("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}"), pod) {
			t.Fatalf("the session's pod (uid %q) is not among the namespace's", pod)
		}
		syscall.Kill(rec.Pid, syscall.SIGKILL)
		for end := time.Now().Add(30 * time.Second); strings.Contains(kc("get", "pods", "-o", "jsonpath={.items[*].metadata.uid}"), pod); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the pod of a session whose supervisor was killed is still there after 30 s")
			}
		}
		st := exec.Command(tg.Pinfold, "session", "status", "--json", rec.ID)
		st.Env = env
		b, _ = st.Output()
		if !strings.Contains(string(b), `"lost"`) {
			t.Errorf("session status after its supervisor's kill: %s", b)
		}
	})

	t.Run("pool-kill-9", func(t *testing.T) {
		// The server and its keeper killed: pinfold clean removes the pool.
		store := t.TempDir()
		ws := t.TempDir()
		os.Chmod(ws, 0o755)
		os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
		env := append(os.Environ(), "PINFOLD_STORE="+store)
		sock := filepath.Join(store, "kube-pool.sock")
		keeper := exec.Command(os.Getenv("PINFOLD_KUBE_HELPER"), "pool", "kill9", "1", sock)
		keeper.Env = env
		in, _ := keeper.StdinPipe()
		defer in.Close()
		if err := keeper.Start(); err != nil {
			t.Fatal(err)
		}
		// One session tells it its template (the CLI's sessions claim from a
		// keeper named by PINFOLD_KUBE_POOL too).
		start := exec.Command(tg.Pinfold, "session", "start", "--json", "--backend", "kubernetes", "--base", "oci:"+kubeImage)
		start.Dir = ws
		start.Env = append(env, "PINFOLD_KUBE_POOL=kill9", "PINFOLD_KUBE_POOL_SOCKET="+sock)
		out, err := start.Output()
		var rec struct{ ID string }
		if err != nil || json.Unmarshal(out, &rec) != nil {
			keeper.Process.Kill()
			t.Fatalf("session start: %v %s", err, out)
		}
		stop := exec.Command(tg.Pinfold, "session", "stop", rec.ID)
		stop.Env = env
		defer stop.Run()
		for end := time.Now().Add(90 * time.Second); kc("get", "pods", "-l", "pinfold.pool=kill9,pinfold.ready=1", "-o", "name") == ""; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(end) {
				keeper.Process.Kill()
				t.Fatal("the keeper made no warm pod")
			}
		}
		// Three claims at once of the one ready pod: one gets it (the
		// others' patches fail their resourceVersion precondition) and the
		// others start pods of their own.
		var wg sync.WaitGroup
		got := make([]string, 3)
		for i := range got {
			wg.Go(func() {
				c := exec.Command(tg.Pinfold, "session", "start", "--backend", "kubernetes", "--base", "oci:"+kubeImage)
				c.Dir = ws
				c.Env = start.Env
				if out, err := c.Output(); err == nil {
					got[i] = strings.TrimSpace(string(out))
				}
			})
		}
		wg.Wait()
		pods := map[string]bool{}
		for _, id := range got {
			if id == "" {
				t.Fatalf("a session did not start: %v", got)
			}
			defer func() {
				stop := exec.Command(tg.Pinfold, "session", "stop", id)
				stop.Env = env
				stop.Run()
			}()
			c := exec.Command(tg.Pinfold, "exec", id, "--", "sh", "-c", `grep -o 'pods/[0-9a-f-]*' /proc/self/mountinfo | head -1`)
			c.Env = env
			out, _ := c.Output()
			pods[strings.TrimSpace(string(out))] = true
		}
		if len(pods) != 3 {
			t.Errorf("3 sessions in %d pods: %v", len(pods), pods)
		}
		if claimed := kc("get", "pods", "-l", "pinfold.template,!pinfold.pool,pinfold.run", "-o", "name"); len(strings.Fields(claimed)) != 1 {
			t.Errorf("claimed pods, want one: %q", claimed)
		}
		for end := time.Now().Add(90 * time.Second); kc("get", "pods", "-l", "pinfold.pool=kill9,pinfold.ready=1", "-o", "name") == ""; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(end) {
				keeper.Process.Kill()
				t.Fatal("the keeper did not refill")
			}
		}
		keeper.Process.Kill()
		keeper.Wait()
		if kc("get", "pods", "-l", "pinfold.pool=kill9", "-o", "name") == "" {
			t.Fatal("the warm pod went before pinfold clean")
		}
		clean := exec.Command(tg.Pinfold, "clean")
		clean.Env = env
		if b, err := clean.CombinedOutput(); err != nil || !strings.Contains(string(b), "removed kubernetes pod/") {
			t.Errorf("pinfold clean: %v %s", err, b)
		}
		for end := time.Now().Add(30 * time.Second); kc("get", "pods", "-l", "pinfold.pool=kill9", "-o", "name") != ""; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the warm pod is still there after pinfold clean")
			}
		}
	})
}

// httpGet asks addr for path with HTTP/1.0 and returns the whole answer.
func httpGet(t *testing.T, addr, path string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path)
	b, _ := io.ReadAll(c)
	return string(b)
}

// kubeInCluster runs pinfold serve in the cluster from
// deploy/kubernetes/serve.yaml: an image of pinfold's binaries and
// busybox, made with the kit's mkimg and imported into its containerd,
// then a tenant's session through the server's pod, with its service
// account's config (no kubeconfig), and the pool's pods gone with the
// server.
func kubeInCluster(t *testing.T, tg conformance.Target, kubectl, kubeconfig, ns string) {
	cache := envOr("K8S_KIT_CACHE", "/var/cache/k8s-kit")
	mkimg, _ := filepath.Glob(filepath.Join(cache, "images-*", "bin", "mkimg"))
	ctrSock := filepath.Join(envOr("K8S_KIT_STATE", "/tmp/k8s-kit"), "containerd.sock")
	busybox, err := exec.LookPath("busybox")
	if len(mkimg) == 0 || err != nil {
		t.Skipf("no kit mkimg (%v) or no busybox on this machine (%v)", mkimg, err)
	}
	if _, err := os.Stat(ctrSock); err != nil {
		t.Skipf("the kit's containerd socket: %v", err)
	}
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "bin", "etc", "tmp"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	for _, b := range []string{"pinfold", "pinfold-api", "pinfold-kube"} {
		src := filepath.Join(filepath.Dir(tg.Pinfold), b)
		if b == "pinfold-kube" {
			src = os.Getenv("PINFOLD_KUBE_HELPER")
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "usr/local/bin", b), data, 0o755)
	}
	data, _ := os.ReadFile(busybox)
	os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755)
	for _, l := range []string{"sh", "cp", "chmod"} {
		os.Symlink("busybox", filepath.Join(root, "bin", l))
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/:/bin/sh\nnonroot:x:65532:65532::/tmp:/bin/sh\n"), 0o644)
	ref := fmt.Sprintf("docker.io/local/pinfold-serve:test-%d", os.Getpid())
	tar := filepath.Join(t.TempDir(), "image.tar")
	if b, err := exec.Command(mkimg[0], "-rootfs", root, "-ref", ref, "-out", tar, "-entrypoint", "/usr/local/bin/pinfold").CombinedOutput(); err != nil {
		t.Fatalf("mkimg: %v %s", err, b)
	}
	ctr := filepath.Join(cache, "bin", "ctr")
	if b, err := exec.Command(ctr, "--address", ctrSock, "-n", "k8s.io", "images", "import", tar).CombinedOutput(); err != nil {
		t.Fatalf("ctr import: %v %s", err, b)
	}
	t.Cleanup(func() { exec.Command(ctr, "--address", ctrSock, "-n", "k8s.io", "images", "rm", ref).Run() })

	kc := func(stdin string, args ...string) string {
		t.Helper()
		c := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v %s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	token := fmt.Sprintf("%x", time.Now().UnixNano()) + "0123456789abcdef"
	kc("", "create", "secret", "generic", "pinfold-serve-tokens", "--from-literal=tokens=alice "+token)
	wd, _ := os.Getwd()
	manifest, err := os.ReadFile(filepath.Join(wd, "..", "..", "deploy", "kubernetes", "serve.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The kit's node has the image and the sessions' busybox; it pulls
	// nothing.
	m := strings.ReplaceAll(string(manifest), "image: IMAGE", "image: "+ref+"\n        imagePullPolicy: Never")
	m = strings.ReplaceAll(m, `"oci:BASE"`, `"oci:`+kubeImage+`"`) // the tenants' granted base
	// The kit's node has 2 CPUs: a session's pod and the pool's two warm
	// pods, made at once, each asking for 1 would leave one unscheduled.
	if m2 := strings.Replace(m, `"cpus": "1"`, `"cpus": "0.25"`, 1); m2 != m {
		m = m2
	} else {
		t.Fatal("the manifest's cpus limit moved: the test cannot fit the kit's node")
	}
	// The kit's plugin enforces no NetworkPolicy: network none is the
	// netoff container's (the namespace is privileged).
	m = strings.Replace(m, "        - {name: PINFOLD_STORE, value: /var/lib/pinfold/store}",
		"        - {name: PINFOLD_STORE, value: /var/lib/pinfold/store}\n        - {name: PINFOLD_KUBE_PULL_POLICY, value: Never}\n        - {name: PINFOLD_KUBE_NETWORK_NONE, value: netoff}", 1)
	if !strings.Contains(m, "PINFOLD_KUBE_PULL_POLICY") {
		t.Fatal("the manifest's PINFOLD_STORE line moved: the test cannot set the pull policy")
	}
	kc(m, "apply", "-f", "-")
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", ns, "delete", "-f", "-", "--wait=false").Run()
		}
	})
	kc("", "rollout", "status", "deploy/pinfold-serve", "--timeout=120s")
	ip := kc("", "get", "pods", "-l", "app.kubernetes.io/name=pinfold-serve", "-o", "jsonpath={.items[0].status.podIP}")
	c, err := client.New("http://"+ip+":7700", client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Create(ctx, client.CreateRequest{Backend: "kubernetes", Base: "oci:" + kubeImage})
	if err != nil {
		t.Fatalf("create through the server in the cluster: %v\n%s", err, kc("", "logs", "deploy/pinfold-serve"))
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Args: []string{"sh", "-c", "echo x > made.txt; ls /var/run/secrets/kubernetes.io 2>/dev/null && echo TOKEN; exit 5"}})
	if err != nil || res.ExitCode != 5 || strings.Contains(res.Stdout, "TOKEN") {
		t.Errorf("exec: %+v %v", res, err)
	}
	if end, err := c.Delete(ctx, sb.ID); err != nil || end.Added != 1 {
		t.Errorf("stop: %+v %v", end, err)
	}
	// The tenant's next session claims a warm pod: its workspaces are
	// fresh directories of one parent, which the pods mount. It sees its
	// own workspace alone there.
	for end := time.Now().Add(90 * time.Second); kc("", "get", "pods", "-l", "pinfold.pool,pinfold.ready=1", "-o", "name") == ""; time.Sleep(300 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no warm pod: %s", kc("", "logs", "deploy/pinfold-serve"))
		}
	}
	start := time.Now()
	sb2, err := c.Create(ctx, client.CreateRequest{Backend: "kubernetes", Base: "oci:" + kubeImage})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a tenant's warm session started in %v", time.Since(start))
	if claimed := kc("", "get", "pods", "-l", "pinfold.template,!pinfold.pool", "-o", "name"); claimed == "" {
		t.Error("the tenant's second session did not claim a warm pod")
	}
	// Every pod the server made is its pod's (the garbage collector
	// deletes them with it).
	serverUID := kc("", "get", "pods", "-l", "app.kubernetes.io/name=pinfold-serve", "-o", "jsonpath={.items[0].metadata.uid}")
	owners := kc("", "get", "pods", "-l", "pinfold.run", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].uid}{"\n"}{end}`)
	for _, l := range strings.Split(owners, "\n") {
		if f := strings.Fields(l); len(f) != 2 || f[1] != serverUID {
			t.Errorf("a pod not owned by the server's pod %s: %q", serverUID, l)
		}
	}
	res, err = c.Exec(ctx, sb2.ID, client.ExecRequest{Args: []string{"sh", "-c", "pwd; ls -a ..; echo y > two.txt"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != sb2.Workspace+"\n.\n..\n"+filepath.Base(sb2.Workspace)+"\n" {
		t.Errorf("exec in the warm session: %+v %v (workspace %s)", res, err, sb2.Workspace)
	}
	if end, err := c.Delete(ctx, sb2.ID); err != nil || end.Added != 1 {
		t.Errorf("stop the warm session: %+v %v", end, err)
	}
	// The server's end (a deleted Deployment: SIGTERM) ends its keeper,
	// which deletes its warm pods.
	kc("", "delete", "deployment", "pinfold-serve", "--wait=true", "--timeout=60s")
	deleted = true
	for end := time.Now().Add(40 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		left := kc("", "get", "pods", "-l", "pinfold.pool", "-o", "name")
		if left == "" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("warm pods 40 s after the server's end: %s", left)
		}
	}
	kc("", "delete", "service,rolebinding,role,serviceaccount,secret,configmap", "-l", "app.kubernetes.io/name=pinfold-serve", "--ignore-not-found")
	kc("", "delete", "secret", "pinfold-serve-tokens", "--ignore-not-found")
}

// zombiesOf lists the children of pid that ended and were not waited for.
func zombiesOf(pid int) []string {
	var found []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			found = append(found, string(b[:i+1]))
		}
	}
	return found
}
