package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
)

// kubeImage is the k8s kit's test image (busybox), which its node holds:
// pods use it with imagePullPolicy Never.
const kubeImage = "docker.io/local/busybox:1"

// kitDir finds the k8s kit (../shared/k8s beside the repository, or
// PINFOLD_K8S_KIT).
func kitDir() string {
	if d := os.Getenv("PINFOLD_K8S_KIT"); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "k8s")
		}
	}
	return ""
}

// kubeCluster returns the kubeconfig of a real cluster for the tests:
// K8S_KIT_KUBECONFIG (a cluster the developer brought up with the kit),
// else one this test brings up with the kit's up.sh and takes down with
// down.sh at its end. Without the kit the test skips, except on CI.
func kubeCluster(t *testing.T) (kubeconfig, kubectl string) {
	if os.Geteuid() != 0 {
		t.Skip("the kubernetes conformance runs as root (the k8s kit's cluster runs on this machine)")
	}
	skip := func(format string, args ...any) {
		if os.Getenv("CI") != "" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	kit := kitDir()
	bin := filepath.Join(envOr("K8S_KIT_CACHE", "/var/cache/k8s-kit"), "bin")
	if kc := os.Getenv("K8S_KIT_KUBECONFIG"); kc != "" {
		return kc, filepath.Join(bin, "kubectl")
	}
	if _, err := os.Stat(filepath.Join(kit, "up.sh")); err != nil {
		t.Skipf("no k8s kit at %s (set PINFOLD_K8S_KIT, or K8S_KIT_KUBECONFIG for a running kit cluster): the kubernetes runtime needs a real cluster", kit)
	}
	if _, err := os.Stat(filepath.Join(bin, "kubectl")); err != nil {
		skip("the k8s kit at %s is not built (scripts/test-setup.sh runs its build.sh): %v", kit, err)
	}
	var errb bytes.Buffer
	up := exec.Command(filepath.Join(kit, "up.sh"))
	up.Stderr = &errb
	out, err := up.Output()
	if err != nil {
		skip("the k8s kit's up.sh failed (exit 3: a cluster of the kit already runs; point K8S_KIT_KUBECONFIG at it): %v\n%s", err, tail(errb.String(), 2000))
	}
	var once sync.Once
	down := func() {
		once.Do(func() {
			if b, err := exec.Command(filepath.Join(kit, "down.sh")).CombinedOutput(); err != nil {
				t.Errorf("the k8s kit's down.sh: %v\n%s", err, tail(string(b), 2000))
			}
		})
	}
	t.Cleanup(down)
	if dl, ok := t.Deadline(); ok {
		// go test's -timeout panics without running cleanups: the cluster
		// goes down before it, whatever the tests are doing.
		timer := time.AfterFunc(time.Until(dl)-30*time.Second, down)
		t.Cleanup(func() { timer.Stop() })
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "export KUBECONFIG="); ok {
			kubeconfig = strings.Trim(v, `'"`)
		}
	}
	if kubeconfig == "" {
		t.Fatalf("up.sh printed no KUBECONFIG: %q", out)
	}
	return kubeconfig, filepath.Join(bin, "kubectl")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var nsSeq atomic.Int64

// kubeNamespace makes a namespace of the test's own and waits for its
// default service account (pods are refused before it exists); it is
// deleted at the end.
//
// level is the Pod Security level its admission enforces; it warns at
// restricted whatever it enforces.
func kubeNamespace(t *testing.T, kubectl, kubeconfig, level string) string {
	ns := fmt.Sprintf("pinfold-conformance-%s-%d-%d", level, os.Getpid(), nsSeq.Add(1))
	run := func(args ...string) ([]byte, error) {
		return exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	}
	if b, err := run("create", "namespace", ns); err != nil {
		t.Fatalf("creating namespace %s: %v %s", ns, err, b)
	}
	t.Cleanup(func() { run("delete", "namespace", ns, "--wait=false") })
	if b, err := run("label", "namespace", ns, "pod-security.kubernetes.io/enforce="+level, "pod-security.kubernetes.io/warn=restricted"); err != nil {
		t.Fatalf("labelling namespace %s: %v %s", ns, err, b)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := run("get", "serviceaccount", "default", "-n", ns); err == nil {
			return ns
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s has no default service account after 60 s", ns)
		}
	}
}

// netScenarios are the scenarios whose subject is the pod's network:
// with the kit's network plugin (a bridge), which enforces no
// NetworkPolicy, network none is the netoff container's, root with
// CAP_NET_ADMIN, which only a namespace at Pod Security "privileged"
// admits. A deny-all policy, what a restricted namespace gets, would be
// set and not enforced there: these scenarios would pass or fail for the
// kit's routing, not for pinfold's confinement.
var netScenarios = []string{"network-none", "network-allow"}

// TestKubernetes runs the suite against pods on a real cluster (the k8s
// kit's single node on this machine), then the runtime's own checks.
// The suite runs in a namespace whose Pod Security admission enforces
// "restricted", network none being the deny-all policy there
// (PINFOLD_KUBE_NETWORK_POLICY=enforced), but for netScenarios, which run
// in a "privileged" one with the netoff container. The runtime's own
// checks, sessions and warm pools run in the privileged one (some check
// netoff's network none); the restricted subtest runs a run, a session,
// a warm pool's pod and serve.yaml's pod where restricted is enforced.
func TestKubernetes(t *testing.T) {
	kubeconfig, kubectl := kubeCluster(t)
	ns := kubeNamespace(t, kubectl, kubeconfig, "privileged")
	restricted := kubeNamespace(t, kubectl, kubeconfig, "restricted")
	helper := filepath.Join(tools, "pinfold-kube")
	build := exec.Command("go", "build", "-o", helper, "github.com/pinfold/pinfold/cmd/pinfold-kube")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pinfold-kube: %v\n%s", err, b)
	}
	// The agent alone, beside the helper, as build.sh puts it: what a
	// cold session's pod gets (the in-cluster serve image has none, and
	// its sessions get pinfold's binary instead).
	ag := exec.Command("go", "build", "-o", filepath.Join(tools, "pinfold-agent"), "github.com/pinfold/pinfold/cmd/pinfold-agent")
	ag.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := ag.CombinedOutput(); err != nil {
		t.Fatalf("building pinfold-agent: %v\n%s", err, b)
	}
	api := exec.Command("go", "build", "-o", filepath.Join(tools, "pinfold-api"), "github.com/pinfold/pinfold/cmd/pinfold-api")
	api.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := api.CombinedOutput(); err != nil {
		t.Fatalf("building pinfold-api: %v\n%s", err, b)
	}
	// The pinfold binary of the kill -9 scenario reads the same settings.
	t.Setenv("PINFOLD_KUBECONFIG", kubeconfig)
	t.Setenv("PINFOLD_KUBE_PULL_POLICY", "Never")
	t.Setenv("PINFOLD_KUBE_HELPER", helper)
	target := func(ns, policy, netoff string) conformance.Target {
		t.Setenv("PINFOLD_KUBE_NAMESPACE", ns)
		t.Setenv("PINFOLD_KUBE_NETWORK_POLICY", policy)
		t.Setenv("PINFOLD_KUBE_NETWORK_NONE", netoff)
		rt := kubernetes.Default()
		if err := rt.Check(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		return conformance.Target{Backend: kubernetes.Name, Runtime: func(string) sandbox.Runtime { return rt }, Base: "oci:" + kubeImage,
			Pinfold: filepath.Join(tools, "pinfold"), Leftovers: rt.Leftovers,
			SysfsShown: "pods get the container runtime's read-only sysfs of the node"}
	}
	t.Run("restricted-namespace", func(t *testing.T) {
		tg := target(restricted, "enforced", "")
		tg.Elsewhere = map[string]string{}
		for _, n := range netScenarios {
			tg.Elsewhere[n] = "run in the privileged namespace (TestKubernetes/privileged-namespace): the kit's network plugin enforces no NetworkPolicy, " +
				"and its network none, the netoff container (root, CAP_NET_ADMIN), is what Pod Security restricted forbids"
		}
		conformance.Run(t, tg)
	})
	tg := target(ns, "", "netoff")
	t.Run("privileged-namespace", func(t *testing.T) {
		tg := tg
		tg.Only = netScenarios
		conformance.Run(t, tg)
	})
	rt := tg.Runtime("").(*kubernetes.Runtime)
	t.Run("kube", func(t *testing.T) { kubeChecks(t, tg, kubectl, kubeconfig, ns) })
	t.Run("sessions", func(t *testing.T) { kubeSessions(t, tg, rt, kubectl, kubeconfig, ns) })
	t.Run("restricted", func(t *testing.T) { kubeRestricted(t, tg, kubectl, kubeconfig) })
	// Nothing of the runs is left in the namespaces.
	for _, ns := range []string{ns, restricted} {
		var left string
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			b, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", ns, "get", "pods,secrets,configmaps,networkpolicies",
				"-l", "pinfold.run", "-o", "name").CombinedOutput()
			if left = strings.TrimSpace(string(b)); err == nil && left == "" {
				break
			}
		}
		if left != "" {
			t.Errorf("left in namespace %s after the runs: %s", ns, left)
		}
	}
}
