package conformance_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/internal/nettest"
)

// kubeChecks are the kubernetes runtime's own checks, beyond the suite:
// the pod's confinement seen from inside, what the cluster's objects hold
// while a run goes on, and network none against a plain pod that does
// reach the same address.
func kubeChecks(t *testing.T, tg conformance.Target, kubectl, kubeconfig, ns string) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	kc := func(args ...string) (string, error) {
		b, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...).CombinedOutput()
		return string(b), err
	}
	pinfold := func(args ...string) *exec.Cmd {
		c := exec.Command(tg.Pinfold, append([]string{"run", "--backend", "kubernetes", "--base", tg.Base}, args...)...)
		c.Dir = ws
		c.Env = append(os.Environ(), "PINFOLD_STORE="+filepath.Join(ws, ".store"))
		return c
	}
	// The API server's address, which a pod on the kit's node reaches.
	cfg, _ := os.ReadFile(kubeconfig)
	m := regexp.MustCompile(`server: https://([0-9.]+):([0-9]+)`).FindStringSubmatch(string(cfg))
	if m == nil {
		t.Fatalf("no API server address in %s", kubeconfig)
	}
	api := m[1] + " " + m[2]

	t.Run("confinement", func(t *testing.T) {
		out, err := pinfold("--", "sh", "-c", `id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status;
ls /var/run/secrets/kubernetes.io 2>/dev/null && echo TOKEN; touch /rootfs-write 2>/dev/null && echo ROOT-WRITABLE;
ip -o link show up | grep -v ': lo:' && echo LINK-UP; echo end`).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		got := string(out)
		for _, w := range []string{"65534\n", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "end\n"} {
			if !strings.Contains(got, w) {
				t.Errorf("inside the pod: no %q in %q", w, got)
			}
		}
		for _, bad := range []string{"TOKEN", "ROOT-WRITABLE", "LINK-UP"} {
			if strings.Contains(got, bad) {
				t.Errorf("inside the pod: %s: %q", bad, got)
			}
		}
	})

	t.Run("modes-kept", func(t *testing.T) {
		// The copy keeps the files' modes whatever the pod's umask, and
		// a read-only directory (which the copy must make writable to
		// fill) is not reported as changed.
		os.WriteFile(filepath.Join(ws, "shared"), []byte("x\n"), 0o664)
		os.Chmod(filepath.Join(ws, "shared"), 0o664)
		os.Mkdir(filepath.Join(ws, "sealed"), 0o755)
		os.WriteFile(filepath.Join(ws, "sealed", "f"), []byte("y\n"), 0o644)
		os.Chmod(filepath.Join(ws, "sealed"), 0o555)
		defer os.Chmod(filepath.Join(ws, "sealed"), 0o755)
		out, err := pinfold("--", "stat", "-c", "%a", "shared").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "664\n") {
			t.Errorf("the copy's mode: %v %q", err, out)
		}
		if strings.Contains(string(out), "changeset") {
			t.Errorf("a run that wrote nothing left a changeset: %q", out)
		}
	})

	t.Run("objects", func(t *testing.T) {
		c := pinfold("-e", "PF_KUBE_SECRET=value-of-the-secret", "-i", "--", "sh", "-c", "echo ready; read x; echo $PF_KUBE_SECRET")
		stdin, _ := c.StdinPipe()
		var out syncBuf
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stdin.Close()
			c.Process.Kill()
			c.Wait()
		}()
		waitReady(t, &out, func() {})
		pods, err := kc("get", "pods", "-l", "pinfold.run", "-o", "json")
		if err != nil {
			t.Fatal(err, pods)
		}
		if strings.Contains(pods, "value-of-the-secret") {
			t.Errorf("the pod object holds an environment value")
		}
		var list struct {
			Items []struct {
				Metadata struct {
					DeletionTimestamp *string `json:"deletionTimestamp"`
				} `json:"metadata"`
				Spec struct {
					AutomountServiceAccountToken *bool `json:"automountServiceAccountToken"`
					Containers                   []struct {
						Name            string `json:"name"`
						SecurityContext struct {
							ReadOnlyRootFilesystem   bool `json:"readOnlyRootFilesystem"`
							RunAsNonRoot             bool `json:"runAsNonRoot"`
							AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation"`
							Capabilities             struct {
								Add  []string `json:"add"`
								Drop []string `json:"drop"`
							} `json:"capabilities"`
						} `json:"securityContext"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(pods), &list); err != nil {
			t.Fatal(err)
		}
		// Pods of the subtests before may still be going.
		live := list.Items[:0]
		for _, it := range list.Items {
			if it.Metadata.DeletionTimestamp == nil {
				live = append(live, it)
			}
		}
		if len(live) != 1 {
			t.Fatalf("want one live pod, got %d: %s", len(live), pods)
		}
		sp := live[0].Spec
		if sp.AutomountServiceAccountToken == nil || *sp.AutomountServiceAccountToken {
			t.Errorf("the pod mounts a service account token")
		}
		for _, ct := range sp.Containers {
			sc := ct.SecurityContext
			// netoff (network none) runs as root with CAP_NET_ADMIN alone,
			// and exits once it has taken the links down.
			netoff := ct.Name == "netoff" && len(sc.Capabilities.Add) == 1 && sc.Capabilities.Add[0] == "NET_ADMIN"
			if !sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 ||
				!netoff && (!sc.RunAsNonRoot || len(sc.Capabilities.Add) > 0) {
				t.Errorf("container %s: %+v", ct.Name, sc)
			}
		}
		owners, err := kc("get", "secrets,networkpolicies", "-l", "pinfold.run", "-o", "jsonpath={range .items[*]}{.kind} {.metadata.ownerReferences[0].kind}{\"\\n\"}{end}")
		if err != nil || strings.Count(owners, "Secret Pod") < 1 || strings.Count(owners, "NetworkPolicy Pod") < 1 || strings.Contains(owners, " \n") {
			t.Errorf("the run's secret and network policy should be owned by its pod: %q %v", owners, err)
		}
		stdin.Write([]byte("go\n"))
		stdin.Close()
		c.Wait()
		if !strings.Contains(out.String(), "value-of-the-secret") {
			t.Errorf("the command did not get its variable: %q", out.String())
		}
	})

	t.Run("network-none-vs-plain-pod", func(t *testing.T) {
		probe := "nc -w 3 " + api + " </dev/null && echo CONNECTED; echo end"
		// A plain pod of the same image reaches the API server: the
		// check below could fail. (Its logs, not an attach, which misses
		// the output of a command this short.)
		control := "pinfold-control-" + strings.ReplaceAll(ns, "pinfold-conformance-", "")
		if out, err := kc("run", control, "--image", strings.TrimPrefix(tg.Base, "oci:"), "--image-pull-policy", "Never",
			"--restart", "Never", "--", "sh", "-c", probe); err != nil {
			t.Fatalf("the control pod: %v %s", err, out)
		}
		defer kc("delete", "pod", control, "--grace-period=1", "--wait=false")
		if out, err := kc("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/"+control, "--timeout=60s"); err != nil {
			t.Fatalf("the control pod did not end: %v %s", err, out)
		}
		out, err := kc("logs", control)
		if err != nil || !strings.Contains(out, "CONNECTED") {
			t.Fatalf("the control pod did not reach %s: %v %s", api, err, out)
		}
		b, err := pinfold("--network", "none", "--", "sh", "-c", probe).CombinedOutput()
		if err != nil || strings.Contains(string(b), "CONNECTED") || !strings.Contains(string(b), "end") {
			t.Errorf("network none: %v %s", err, b)
		}
	})

	t.Run("allow-objects", func(t *testing.T) {
		// The kit's bridge plugin does not enforce NetworkPolicies, so
		// this checks what pinfold gives the cluster, not what the plugin
		// does with it: names resolved here (through the test's DNS
		// server) into the pod's /etc/hosts and the policy's addresses,
		// an address as it is, no resolver in the pod, and the allowed
		// address reachable.
		env := nettest.NewEnv(t)
		c := pinfold("--network", "allow", "--allow", "allowed.test", "--allow", m[1], "--dns", env.DNS, "-i", "--",
			"sh", "-c", "grep allowed.test /etc/hosts; cat /etc/resolv.conf; nc -w 3 "+api+" </dev/null && echo CONNECTED; echo ready; read x")
		c.Env = append(c.Env, "PINFOLD_KUBE_NETWORK_POLICY=enforced")
		stdin, _ := c.StdinPipe()
		var out syncBuf
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stdin.Close()
			c.Process.Kill()
			c.Wait()
		}()
		waitReady(t, &out, func() {})
		got := out.String()
		for _, w := range []string{env.Host.Addr + "\tallowed.test", "nameserver 127.0.0.1", "CONNECTED"} {
			if !strings.Contains(got, w) {
				t.Errorf("inside the pod: no %q in %q", w, got)
			}
		}
		pols, err := kc("get", "networkpolicies", "-l", "pinfold.run", "-o", "jsonpath={range .items[*]}{range .spec.egress[*].to[*]}{.ipBlock.cidr} {end}{end}")
		if err != nil {
			t.Fatal(err, pols)
		}
		for _, w := range []string{env.Host.Addr + "/32", m[1] + "/32"} {
			if !strings.Contains(pols, w) {
				t.Errorf("the policy's egress lacks %s: %q", w, pols)
			}
		}
		if strings.Count(pols, "/") != 3 { // the test host's IPv4 and IPv6, the API server's
			t.Errorf("the policy's egress holds more than the allowed: %q", pols)
		}
	})

	t.Run("kill-pinfold", func(t *testing.T) {
		// pinfold killed while its command writes: the helper removes the
		// pod, its secret and its policy by itself, without pinfold clean.
		c := pinfold("-i", "--", "sh", "-c", "echo ready; while :; do echo tick; echo tock >&2; sleep 0.1; done")
		stdin, _ := c.StdinPipe()
		defer stdin.Close()
		var out syncBuf
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitReady(t, &out, func() { c.Process.Kill(); c.Wait() })
		// This run's pod: the one not being deleted (those of the
		// subtests before may still be going).
		list, _ := kc("get", "pods", "-l", "pinfold.run", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
		var name string
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) == 1 {
				name = f[0]
			}
		}
		if name == "" {
			c.Process.Kill()
			c.Wait()
			t.Fatalf("no live pod: %q", list)
		}
		c.Process.Kill()
		c.Wait()
		var left string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			left, _ = kc("get", "pod/"+name, "secret/"+name, "configmap/"+name, "networkpolicy/"+name, "-o", "name", "--ignore-not-found")
			if strings.TrimSpace(left) == "" {
				return
			}
		}
		t.Errorf("20 s after pinfold was killed: %s", left)
	})

	t.Run("kill-helper-too", func(t *testing.T) {
		// pinfold and its helper both killed: pinfold clean removes the pod.
		c := pinfold("--", "sh", "-c", "echo ready; sleep 120")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out syncBuf
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitReady(t, &out, func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Wait() })
		// The helper first (it has a process group of its own), so that it
		// cannot remove the pod when pinfold goes.
		for _, h := range conformance.ProcessesWith("pinfold-kube run") {
			var pid int
			if _, err := fmt.Sscanf(h, "pid %d:", &pid); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		c.Wait()
		if pods, _ := kc("get", "pods", "-l", "pinfold.run", "-o", "name"); strings.TrimSpace(pods) == "" {
			t.Fatalf("the pod went before pinfold clean: the check shows nothing")
		}
		clean := exec.Command(tg.Pinfold, "clean")
		clean.Env = append(os.Environ(), "PINFOLD_STORE="+filepath.Join(ws, ".store"))
		if b, err := clean.CombinedOutput(); err != nil || !strings.Contains(string(b), "removed kubernetes pod/") {
			t.Errorf("pinfold clean: %v %s", err, b)
		}
	})
}

// syncBuf is a buffer the writers of a process may share.
// waitReady waits up to a minute for "ready" in out; else it calls stop
// and fails.
func waitReady(t *testing.T, out *syncBuf, stop func()) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "ready"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			stop()
			t.Fatalf("no ready: %s", out.String())
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
