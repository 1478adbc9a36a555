package conformance_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
)

// kubeRestricted runs pinfold's pods in a namespace whose Pod Security
// admission enforces "restricted", as managed clusters do: a run, a
// session (its pod ready, every container running), a warm pool's pod,
// and the serve Deployment's pod template. Network none is the deny-all
// policy there (PINFOLD_KUBE_NETWORK_POLICY=enforced): the kit's plugin
// does not enforce policies, so this checks admission and readiness, not
// the policy's effect. Then the refusals that come before any pod.
func kubeRestricted(t *testing.T, tg conformance.Target, kubectl, kubeconfig string) {
	ns := kubeNamespace(t, kubectl, kubeconfig, "restricted")
	kc := func(stdin string, args ...string) (string, error) {
		c := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		b, err := c.CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	store := t.TempDir()
	// The whole environment, whatever the suite's: policy mode, no netoff.
	env := func(extra ...string) []string {
		var e []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PINFOLD_KUBE_NETWORK_") && !strings.HasPrefix(kv, "PINFOLD_KUBE_NAMESPACE=") {
				e = append(e, kv)
			}
		}
		return append(append(e, "PINFOLD_STORE="+store, "PINFOLD_KUBE_NAMESPACE="+ns), extra...)
	}
	enforced := env("PINFOLD_KUBE_NETWORK_POLICY=enforced")
	pinfold := func(env []string, args ...string) (string, error) {
		c := exec.Command(tg.Pinfold, args...)
		c.Dir, c.Env = ws, env
		b, err := c.CombinedOutput()
		return string(b), err
	}

	t.Run("run", func(t *testing.T) {
		out, err := pinfold(enforced, "run", "--backend", "kubernetes", "--base", tg.Base, "--", "sh", "-c", "echo hi > made.txt; id -u")
		if err != nil || !strings.Contains(out, "65534") || !strings.Contains(out, "1 added") {
			t.Fatalf("a run in a restricted namespace: %v\n%s", err, out)
		}
	})

	t.Run("session", func(t *testing.T) {
		pinfold(enforced, "discard") // the run's changeset, open in the workspace
		c := exec.Command(tg.Pinfold, "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base)
		trace := filepath.Join(t.TempDir(), "trace")
		c.Dir, c.Env = ws, append(enforced, "PINFOLD_KUBE_TRACE_FILE="+trace)
		out, err := c.Output()
		var rec struct{ ID, Changeset string }
		if err != nil || json.Unmarshal(out, &rec) != nil || rec.Changeset == "" {
			t.Fatalf("session start in a restricted namespace: %v\n%s", err, out)
		}
		defer pinfold(enforced, "session", "stop", rec.ID)
		if out, err := pinfold(enforced, "exec", rec.ID, "--", "sh", "-c", "echo s > s.txt; echo ok"); err != nil || out != "ok\n" {
			t.Errorf("exec: %v %q", err, out)
		}
		// Every container of the session's pod ready (no container that
		// exits and leaves it NotReady), and a deadline of its own.
		// (The run's pod may still be going, its containers not ready.)
		list, _ := kc("", "get", "pods", "-l", "pinfold.run", "-o",
			`jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.status.containerStatuses[*].ready}|{.spec.activeDeadlineSeconds}{"\n"}{end}`)
		var ready string
		for _, l := range strings.Split(list, "\n") {
			if strings.HasPrefix(l, "|") {
				ready += l + "\n"
			}
		}
		// (A workspace read-write in main is copied by main: one
		// container, no copy container.)
		if ready != "|true|86400\n" {
			t.Errorf("the session's pod: ready and deadline %q (of %q)", ready, list)
		}
		// Its agent and workspace came through the pod's own volumes (no
		// exec before it was ready): the projected volume "in" of the
		// agent's ConfigMaps, shared, and the workspace's, owned by the
		// pod.
		vols, _ := kc("", "get", "pods", "-l", "pinfold.run", "-o",
			`jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.metadata.name} {.spec.volumes[*].name}{"\n"}{end}`)
		var pod string
		for _, l := range strings.Split(vols, "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "|")); strings.HasPrefix(l, "|") && len(f) > 0 && slices.Contains(f[1:], "in") {
				pod = f[0]
			}
		}
		if pod == "" {
			t.Errorf("no session pod with the volume of its files: %q", vols)
		} else if own, _ := kc("", "get", "configmap", pod, "-o", "jsonpath={.metadata.ownerReferences[0].kind} {.immutable}"); own != "Pod true" {
			t.Errorf("the workspace's configmap %s: owner and immutable %q", pod, own)
		}
		if agents, _ := kc("", "get", "configmaps", "-l", "pinfold.agent", "-o", "name"); agents == "" {
			t.Errorf("no configmap of the agent's")
		}
		// main runs the agent, and the session's first connection was an
		// attach to it (no exec before the session was ready); its stdin
		// is the attach's, once.
		if b, _ := os.ReadFile(trace); !strings.Contains(string(b), "agent by attach") {
			t.Errorf("the session's first connection was not an attach to main:\n%s", b)
		}
		if in, _ := kc("", "get", "pod", pod, "-o", `jsonpath={.spec.containers[0].stdin} {.spec.containers[0].stdinOnce}`); pod != "" && in != "true true" {
			t.Errorf("main's stdin and stdinOnce: %q", in)
		}
		// A running session's changeset is read by its id (a pod's
		// writes come back when the session stops); pinfold diff without
		// one names it.
		if out, err := pinfold(enforced, "diff", rec.Changeset); err != nil {
			t.Errorf("pinfold diff %s of a running session: %v %s", rec.Changeset, err, out)
		}
		if out, _ := pinfold(enforced, "diff"); !strings.Contains(out, "pinfold diff "+rec.Changeset) {
			t.Errorf("pinfold diff in a running session's workspace does not name its changeset: %s", out)
		}
		// A running pod's changeset comes back when the session stops.
		if out, err := pinfold(enforced, "session", "stop", rec.ID); err != nil || !strings.Contains(out, "1 added") {
			t.Errorf("session stop: %v %s", err, out)
		}
	})

	// A user who may not attach (no pods/attach in its Role) still gets
	// a cold session: the attach is refused, the agent is started by
	// exec and the connections go through exec spares. Its first
	// command's output and the changeset are whole.
	t.Run("session-attach-refused", func(t *testing.T) {
		role := `apiVersion: v1
kind: ServiceAccount
metadata: {name: no-attach}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: no-attach}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [create, get, list, watch, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [pods/exec]
  verbs: [create, get]
- apiGroups: [""]
  resources: [secrets, configmaps]
  verbs: [create, patch, list, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, patch, list, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: no-attach}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-attach}
subjects:
- {kind: ServiceAccount, name: no-attach}
`
		if out, err := kc(role, "apply", "-f", "-"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		defer kc("", "delete", "rolebinding,role,serviceaccount", "no-attach", "--ignore-not-found")
		token, err := kc("", "create", "token", "no-attach")
		if err != nil {
			t.Fatalf("%v %s", err, token)
		}
		b, err := os.ReadFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(t.TempDir(), "kubeconfig")
		os.WriteFile(cfg, b, 0o600)
		kcfg := func(args ...string) {
			if out, err := exec.Command(kubectl, append([]string{"--kubeconfig", cfg}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
		}
		kcfg("config", "set-credentials", "no-attach", "--token="+token)
		kcfg("config", "set-context", "--current", "--user=no-attach")
		trace := filepath.Join(t.TempDir(), "trace")
		e := append(enforced, "PINFOLD_KUBECONFIG="+cfg, "PINFOLD_KUBE_TRACE_FILE="+trace)
		own := t.TempDir()
		os.Chmod(own, 0o755)
		pinfold := func(env []string, args ...string) (string, error) {
			c := exec.Command(tg.Pinfold, args...)
			c.Dir, c.Env = own, env
			b, err := c.CombinedOutput()
			return string(b), err
		}
		out, err := pinfold(e, "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base)
		var rec struct{ ID string }
		if err != nil || json.Unmarshal([]byte(out), &rec) != nil {
			tr, _ := os.ReadFile(trace)
			t.Fatalf("session start without pods/attach: %v\n%s\n%s", err, out, tr)
		}
		defer pinfold(e, "session", "stop", rec.ID)
		if tr, _ := os.ReadFile(trace); !strings.Contains(string(tr), "agent by exec") || !strings.Contains(string(tr), "forbidden") {
			t.Errorf("the attach was not refused, or no fallback to the agent's exec:\n%s", tr)
		}
		want := strings.Repeat("0123456789", 20000)
		if out, err := pinfold(e, "exec", rec.ID, "--", "sh", "-c", `i=0; while [ $i -lt 20000 ]; do printf 0123456789; i=$((i+1)); done; echo w > w.txt`); err != nil || out != want {
			t.Errorf("exec: %v, %d bytes of output (want %d)", err, len(out), len(want))
		}
		if out, err := pinfold(e, "session", "stop", rec.ID); err != nil || !strings.Contains(out, "1 added") {
			t.Errorf("session stop: %v %s", err, out)
		}
	})

	// A workspace over 512 KiB as a tar is copied by exec, as before;
	// the session is the same.
	t.Run("session-large-workspace", func(t *testing.T) {
		big := t.TempDir()
		os.Chmod(big, 0o755)
		data := make([]byte, 700<<10)
		for i := range data {
			data[i] = byte(i*7919 + i/251)
		}
		os.WriteFile(filepath.Join(big, "big"), data, 0o644)
		c := exec.Command(tg.Pinfold, "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base)
		c.Dir, c.Env = big, enforced
		out, err := c.Output()
		var rec struct{ ID string }
		if err != nil || json.Unmarshal(out, &rec) != nil {
			t.Fatalf("session start: %v\n%s", err, out)
		}
		defer pinfold(enforced, "session", "stop", rec.ID)
		sum := sha256.Sum256(data)
		if out, err := pinfold(enforced, "exec", rec.ID, "--", "sha256sum", "big"); err != nil || !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
			t.Errorf("the large workspace in the pod: %v %q", err, out)
		}
	})

	// The agent's ConfigMaps are the namespace's: whoever may write
	// ConfigMaps there could put another binary under the agent's name.
	// The pod checks the agent's sha256 and refuses to start.
	t.Run("session-tampered-agent", func(t *testing.T) {
		agent, err := os.ReadFile(filepath.Join(filepath.Dir(tg.Pinfold), "pinfold-agent"))
		if err != nil {
			t.Fatal(err)
		}
		ns2 := kubeNamespace(t, kubectl, kubeconfig, "restricted")
		h := sha256.Sum256(agent)
		hash := hex.EncodeToString(h[:])[:16]
		bad := append([]byte(nil), agent...)
		bad[len(bad)/2] ^= 0xff
		dir := t.TempDir()
		const part = 1000 << 10
		for i := 0; i*part < len(bad); i++ {
			f := filepath.Join(dir, "part")
			os.WriteFile(f, bad[i*part:min(len(bad), (i+1)*part)], 0o644)
			name := fmt.Sprintf("pinfold-agent-%s-%d", hash, i)
			if out, err := kc("", "-n", ns2, "create", "configmap", name, "--from-file=part="+f); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			if out, err := kc("", "-n", ns2, "label", "configmap", name, "pinfold.agent="+hash); err != nil {
				t.Fatalf("%v %s", err, out)
			}
		}
		c := exec.Command(tg.Pinfold, "session", "start", "--backend", "kubernetes", "--base", tg.Base)
		// A store of its own: the failed session's record is not the
		// other subtests'.
		c.Dir, c.Env = ws, env("PINFOLD_KUBE_NETWORK_POLICY=enforced", "PINFOLD_KUBE_NAMESPACE="+ns2, "PINFOLD_STORE="+t.TempDir())
		b, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "is not pinfold's") {
			t.Errorf("a session with a tampered agent: %v %s", err, b)
		}
		var left string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			if left, _ = kc("", "-n", ns2, "get", "pods,configmaps,secrets", "-l", "pinfold.run", "-o", "name"); left == "" {
				break
			}
		}
		if left != "" {
			t.Errorf("left after the refused start: %s", left)
		}
	})

	// The agent from an image volume (PINFOLD_KUBE_AGENT_IMAGE): an image
	// of pinfold-agent alone, made with the kit's mkimg and imported into
	// its containerd; the session's pod passes restricted and its agent
	// answers without having been copied in.
	t.Run("agent-image", func(t *testing.T) {
		cache := envOr("K8S_KIT_CACHE", "/var/cache/k8s-kit")
		mkimg, _ := filepath.Glob(filepath.Join(cache, "images-*", "bin", "mkimg"))
		if len(mkimg) == 0 {
			if os.Getenv("CI") != "" {
				t.Fatal("no kit mkimg")
			}
			t.Skip("no kit mkimg")
		}
		root := t.TempDir()
		data, err := os.ReadFile(filepath.Join(filepath.Dir(tg.Pinfold), "pinfold-agent"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "pinfold-agent"), data, 0o755)
		ref := fmt.Sprintf("docker.io/local/pinfold-agent:test-%d", os.Getpid())
		tar := filepath.Join(t.TempDir(), "agent.tar")
		if b, err := exec.Command(mkimg[0], "-rootfs", root, "-ref", ref, "-out", tar, "-entrypoint", "/pinfold-agent").CombinedOutput(); err != nil {
			t.Fatalf("mkimg: %v %s", err, b)
		}
		ctr, ctrSock := filepath.Join(cache, "bin", "ctr"), filepath.Join(envOr("K8S_KIT_STATE", "/tmp/k8s-kit"), "containerd.sock")
		if b, err := exec.Command(ctr, "--address", ctrSock, "-n", "k8s.io", "images", "import", tar).CombinedOutput(); err != nil {
			t.Fatalf("ctr import: %v %s", err, b)
		}
		t.Cleanup(func() { exec.Command(ctr, "--address", ctrSock, "-n", "k8s.io", "images", "rm", ref).Run() })
		withImage := append(append([]string(nil), enforced...), "PINFOLD_KUBE_AGENT_IMAGE="+ref)
		c := exec.Command(tg.Pinfold, "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base, "--access", "none")
		c.Dir, c.Env = ws, withImage
		out, err := c.Output()
		var rec struct{ ID string }
		if err != nil || json.Unmarshal(out, &rec) != nil || rec.ID == "" {
			t.Fatalf("session start with an agent image: %v\n%s", err, out)
		}
		defer pinfold(withImage, "session", "stop", rec.ID)
		if out, err := pinfold(withImage, "exec", rec.ID, "--", "sh", "-c", "ls /.pinfold/bin; echo ok"); err != nil || out != "pinfold-agent\nok\n" {
			t.Errorf("exec: %v %q (want the image's pinfold-agent alone in the agent's directory)", err, out)
		}
		vols, _ := kc("", "get", "pods", "-l", "pinfold.run", "-o", `jsonpath={range .items[*]}{.spec.volumes[*].image.reference}{"\n"}{end}`)
		if !strings.Contains(vols, ref) {
			t.Errorf("no pod mounts the agent image: %q", vols)
		}
	})

	t.Run("warm-pool", func(t *testing.T) {
		serve := exec.Command(tg.Pinfold, "serve", "--kube-pool", "1")
		serve.Dir, serve.Env = ws, enforced
		var log syncBuf
		serve.Stdout, serve.Stderr = &log, &log
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		defer serve.Wait()
		defer serve.Process.Signal(os.Interrupt)
		sock := filepath.Join(store, "api.sock")
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("no server socket: %s", log.String())
			}
		}
		host := "unix://" + sock
		out, err := pinfold(append(enforced, "PINFOLD_HOST="+host), "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base)
		var rec struct{ ID string }
		if err != nil || json.Unmarshal([]byte(out), &rec) != nil {
			t.Fatalf("session start through the server: %v\n%s\n%s", err, out, log.String())
		}
		defer pinfold(append(enforced, "PINFOLD_HOST="+host), "session", "stop", rec.ID)
		var got string
		for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if got, _ = kc("", "get", "pods", "-l", "pinfold.pool,pinfold.ready=1", "-o", "name"); got != "" {
				break
			}
		}
		if got == "" {
			events, _ := kc("", "get", "events")
			t.Fatalf("no warm pod admitted and ready in a restricted namespace:\n%s\n%s", log.String(), events)
		}
		ready, _ := kc("", "get", "pods", "-l", "pinfold.pool,pinfold.ready=1", "-o", `jsonpath={.items[*].status.containerStatuses[*].ready}`)
		if strings.Contains(ready, "false") {
			t.Errorf("a warm pod is not ready: %q", ready)
		}
	})

	t.Run("serve-manifest", func(t *testing.T) {
		// The API server's own check: a dry run of the manifest warns of
		// what its pods would break (the namespace warns at restricted).
		wd, _ := os.Getwd()
		m, err := os.ReadFile(filepath.Join(wd, "..", "..", "deploy", "kubernetes", "serve.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		manifest := strings.ReplaceAll(string(m), "image: IMAGE", "image: "+kubeImage)
		out, err := kc(manifest, "apply", "--dry-run=server", "-f", "-")
		if err != nil || strings.Contains(out, "PodSecurity") || !strings.Contains(out, "deployment.apps/pinfold-serve") {
			t.Errorf("serve.yaml in a restricted namespace: %v\n%s", err, out)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		// No policy mode, no netoff: network none refused, saying what
		// the cluster needs; the default base, and debian-12 before it is
		// built (minutes of debootstrap), saying --base oci:REF.
		plain := env()
		for name, c := range map[string]struct {
			args []string
			env  []string
			want []string
		}{
			"network none": {[]string{"--base", tg.Base}, plain, []string{"PF143", "PINFOLD_KUBE_NETWORK_POLICY=enforced", "PINFOLD_KUBE_NETWORK_NONE=netoff"}},
			"allow":        {[]string{"--base", tg.Base, "--network", "allow", "--allow", "192.0.2.1"}, env("PINFOLD_KUBE_NETWORK_NONE=netoff"), []string{"PF143", "PINFOLD_KUBE_NETWORK_POLICY=enforced"}},
			"no base":      {nil, enforced, []string{"PF143", "--base oci:REF"}},
			"debian-12":    {[]string{"--base", "debian-12"}, enforced, []string{"PF143", "--base oci:REF"}},
		} {
			start := time.Now()
			out, err := pinfold(c.env, append(append([]string{"run", "--backend", "kubernetes"}, c.args...), "--", "true")...)
			if err == nil {
				t.Errorf("%s: ran", name)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("%s: no %q in %s", name, w, out)
				}
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("%s: refused after %v", name, d)
			}
		}
		if bases, _ := filepath.Glob(filepath.Join(store, "bases", "*")); len(bases) > 0 {
			t.Errorf("a base was built for a plan the runtime refuses: %v", bases)
		}
		// A session refused leaves no session behind.
		out, err := pinfold(plain, "session", "start", "--backend", "kubernetes", "--base", tg.Base)
		if err == nil || !strings.Contains(out, "PF143") || !strings.Contains(out, "PINFOLD_KUBE_NETWORK_POLICY=enforced") {
			t.Errorf("session start without network none: %v %s", err, out)
		}
		if out, _ := pinfold(plain, "session", "ls", "--all"); strings.Contains(out, "failed") {
			t.Errorf("a refused session left a record:\n%s", out)
		}
	})

	t.Run("relative-kubeconfig", func(t *testing.T) {
		// A relative PINFOLD_KUBECONFIG works for a session, whose
		// supervisor runs in /, as for a run.
		rel, err := filepath.Rel(ws, kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		e := append(enforced, "PINFOLD_KUBECONFIG="+rel)
		out, err := pinfold(e, "session", "start", "--json", "--backend", "kubernetes", "--base", tg.Base)
		var rec struct{ ID string }
		if err != nil || json.Unmarshal([]byte(out), &rec) != nil {
			t.Fatalf("session start with PINFOLD_KUBECONFIG=%s: %v\n%s", rel, err, out)
		}
		if out, err := pinfold(e, "session", "stop", rec.ID); err != nil {
			t.Errorf("session stop: %v %s", err, out)
		}
	})
}
