// Command kubernetes measures pinfold's kubernetes runtime against
// kubectl on the same cluster and image, in one run:
//
//   - a command in a new pod: `pinfold run --backend kubernetes -- true`
//     (with the changeset access: the workspace is copied in and out, and
//     with --access none) against `kubectl run --rm -i --restart=Never`;
//   - a command in a running pod: the helper's exec (`pinfold-kube exec
//     POD -- true`, the path a run's command takes) against `kubectl exec
//     POD -- true`;
//   - sessions: `pinfold session start --backend kubernetes`, cold and
//     from a warm pool (a pool keeper running, as `pinfold serve
//     --kube-pool` starts it), against `kubectl run` of a sleeping pod
//     until it is Ready, the three in each round; `pinfold exec SESSION
//     -- true` (straight to the store's socket, and through `pinfold
//     serve`) against `kubectl exec POD -- true` of the same image;
//   - Ctrl-C: the time from a SIGINT to `pinfold run` until the command
//     in the pod, which traps it, has printed that it got it.
//
// Network none is the netoff container's (-network netoff: the kit's
// plugin enforces no NetworkPolicy, so the namespace is privileged), or
// a deny-all policy in a namespace that enforces Pod Security
// "restricted" (-network policy: the pods real clusters get; on the kit
// their timing only, since its plugin does not enforce the policy).
//
// A session's agent is copied in (pinfold-agent beside pinfold-kube, as
// build.sh puts it), or with -agent-image REF mounted from an image the
// node holds (PINFOLD_KUBE_AGENT_IMAGE).
//
// Rounds are paired: each round runs every side once, in rotating order;
// a ratio is the median of the per-round ratios.
//
//	go run ./bench/kubernetes -pinfold bin/pinfold -kubeconfig /tmp/k8s-kit/kubeconfig -kubectl /var/cache/k8s-kit/bin/kubectl
//
// The cluster is the k8s kit's (../shared/k8s); the image is its busybox,
// which the node holds (imagePullPolicy Never).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	pinfold := flag.String("pinfold", "bin/pinfold", "the pinfold binary (pinfold-kube beside it)")
	kubeconfig := flag.String("kubeconfig", os.Getenv("K8S_KIT_KUBECONFIG"), "the cluster's kubeconfig")
	kubectl := flag.String("kubectl", "kubectl", "kubectl")
	image := flag.String("image", "docker.io/local/busybox:1", "the image, which the node holds")
	rounds := flag.Int("n", 10, "rounds")
	network := flag.String("network", "netoff", "how network none is had: netoff or policy")
	agentImage := flag.String("agent-image", "", "an image holding pinfold-agent at /pinfold-agent, which the node has (PINFOLD_KUBE_AGENT_IMAGE); \"\": the agent is copied in")
	flag.Parse()
	if *network != "netoff" && *network != "policy" {
		fail(fmt.Errorf("-network is netoff or policy"))
	}
	if *kubeconfig == "" {
		fail(fmt.Errorf("give -kubeconfig (or K8S_KIT_KUBECONFIG)"))
	}
	bin, err := filepath.Abs(*pinfold)
	if err != nil {
		fail(err)
	}
	helper := filepath.Join(filepath.Dir(bin), "pinfold-kube")
	ns := fmt.Sprintf("pinfold-bench-%d", os.Getpid())
	kc := func(args ...string) *exec.Cmd {
		return exec.Command(*kubectl, append([]string{"--kubeconfig", *kubeconfig, "-n", ns}, args...)...)
	}
	if b, err := kc("create", "namespace", ns).CombinedOutput(); err != nil {
		fail(fmt.Errorf("%v %s", err, b))
	}
	defer kc("delete", "namespace", ns, "--wait=false").Run()
	level := "privileged"
	if *network == "policy" {
		level = "restricted"
	}
	if b, err := kc("label", "namespace", ns, "pod-security.kubernetes.io/enforce="+level).CombinedOutput(); err != nil {
		fail(fmt.Errorf("%v %s", err, b))
	}
	for end := time.Now().Add(60 * time.Second); kc("get", "serviceaccount", "default").Run() != nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			fail(fmt.Errorf("no default service account in %s", ns))
		}
	}
	ws, err := os.MkdirTemp("", "pinfold-bench-kube-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(ws)
	// The store beside the workspace, not in it: the workspace is copied
	// into every pod.
	storeDir := ws + ".store"
	defer os.RemoveAll(storeDir)
	os.WriteFile(filepath.Join(ws, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644)
	env := append(os.Environ(), "PINFOLD_KUBECONFIG="+*kubeconfig, "PINFOLD_KUBE_NAMESPACE="+ns, "PINFOLD_KUBE_PULL_POLICY=Never",
		"PINFOLD_KUBE_HELPER="+helper, "PINFOLD_STORE="+storeDir, "PINFOLD_KUBE_NETWORK_NONE=", "PINFOLD_KUBE_NETWORK_POLICY=")
	if *network == "policy" {
		env = append(env, "PINFOLD_KUBE_NETWORK_POLICY=enforced")
	} else {
		env = append(env, "PINFOLD_KUBE_NETWORK_NONE=netoff")
	}
	if *agentImage != "" {
		env = append(env, "PINFOLD_KUBE_AGENT_IMAGE="+*agentImage)
	}
	fmt.Printf("network none: %s (namespace %s, Pod Security %s), agent image %q\n", *network, ns, level, *agentImage)
	pf := func(args ...string) func() error {
		return func() error {
			c := exec.Command(bin, append([]string{"run", "--backend", "kubernetes", "--base", "oci:" + *image}, args...)...)
			c.Dir, c.Env = ws, env
			if b, err := c.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, b)
			}
			return nil
		}
	}
	n := 0
	kubectlRun := func() error {
		n++
		name := fmt.Sprintf("bench-%d", n)
		b, err := kc(append(restricted(name, level), "run", name, "--image", *image, "--image-pull-policy", "Never", "--restart", "Never",
			"--rm", "-i", "--quiet", "--", "true")...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		return nil
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average before: %s", load)
	report("new pod: pinfold run -- true (changeset access) vs kubectl run --rm", *rounds, pf("--", "true"), kubectlRun)
	report("new pod: pinfold run --access none -- true vs kubectl run --rm", *rounds, pf("--access", "none", "--", "true"), kubectlRun)

	// A running pod for the execs.
	if b, err := kc(append(restricted("sleeper", level), "run", "sleeper", "--image", *image, "--image-pull-policy", "Never", "--restart", "Never", "--", "sleep", "3600")...).CombinedOutput(); err != nil {
		fail(fmt.Errorf("%v %s", err, b))
	}
	if b, err := kc("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=60s").CombinedOutput(); err != nil {
		fail(fmt.Errorf("%v %s", err, b))
	}
	pexec := func() error {
		c := exec.Command(helper, "exec", "sleeper", "--", "true")
		c.Env = env
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		return nil
	}
	kexec := func() error {
		if b, err := kc("exec", "sleeper", "--", "true").CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, b)
		}
		return nil
	}
	report("exec in a running pod: pinfold-kube exec vs kubectl exec", *rounds*3, pexec, kexec)
	interrupt(bin, *image, ws, env, *rounds)
	sessions(bin, helper, *image, ws, storeDir, env, kc, *rounds, kexec, level)
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("load average after: %s", load)
}

// sessions measures session start (warm, cold) and exec.
func sessions(bin, helper, image, ws, store string, env []string, kc func(...string) *exec.Cmd, rounds int, kexec func() error, level string) {
	poolSock := filepath.Join(store, "kube-pool.sock")
	keeper := exec.Command(helper, "pool", "bench", "1", poolSock)
	keeper.Env = env
	in, err := keeper.StdinPipe()
	if err != nil {
		fail(err)
	}
	if err := keeper.Start(); err != nil {
		fail(err)
	}
	defer func() { in.Close(); keeper.Wait() }()
	var ids []string
	defer func() {
		for _, id := range ids {
			c := exec.Command(bin, "session", "stop", id)
			c.Env = env
			c.Run()
		}
	}()
	start := func(pool bool) func() error {
		return func() error {
			c := exec.Command(bin, "session", "start", "--backend", "kubernetes", "--base", "oci:"+image)
			c.Dir, c.Env = ws, env
			if pool {
				c.Env = append(c.Env, "PINFOLD_KUBE_POOL=bench", "PINFOLD_KUBE_POOL_SOCKET="+poolSock)
			}
			out, err := c.Output()
			if err != nil {
				return fmt.Errorf("session start: %v: %s", err, out)
			}
			id := strings.TrimSpace(string(out))
			ids = append(ids, id)
			return nil
		}
	}
	stopAll := func() {
		for _, id := range ids {
			c := exec.Command(bin, "session", "stop", id)
			c.Env = env
			c.Run()
		}
		ids = nil
	}
	ready := func() {
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if b, _ := kc("get", "pods", "-l", "pinfold.pool=bench,pinfold.ready=1", "-o", "name").Output(); len(strings.TrimSpace(string(b))) > 0 {
				return
			}
		}
		fail(fmt.Errorf("the pool has no ready pod after 60 s"))
	}
	// The keeper learns the template from a first (cold) session.
	if err := start(true)(); err != nil {
		fail(err)
	}
	stopAll()
	n := 0
	kubectlUp := func() error {
		n++
		name := fmt.Sprintf("up-%d", n)
		defer kc("delete", "pod", name, "--grace-period=1", "--wait=false").Run()
		if b, err := kc(append(restricted(name, level), "run", name, "--image", image, "--image-pull-policy", "Never", "--restart", "Never", "--", "sleep", "3600")...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, b)
		}
		if b, err := kc("wait", "--for=condition=Ready", "pod/"+name, "--timeout=60s").CombinedOutput(); err != nil {
			return fmt.Errorf("%v %s", err, b)
		}
		return nil
	}
	// Each round: kubectl, cold, warm, in rotating order; the pool is
	// refilled before the round, not counted.
	if err := kubectlUp(); err != nil {
		fail(err)
	}
	var tk, tc, tw, rc, rw []float64
	for i := 0; i < rounds; i++ {
		ready()
		sides := []func() error{kubectlUp, start(false), start(true)}
		var d [3]float64
		for j := range 3 {
			k := (i + j) % 3
			t0 := time.Now()
			if err := sides[k](); err != nil {
				fail(err)
			}
			d[k] = time.Since(t0).Seconds()
		}
		stopAll()
		tk, tc, tw = append(tk, d[0]), append(tc, d[1]), append(tw, d[2])
		rc, rw = append(rc, d[1]/d[0]), append(rw, d[2]/d[0])
	}
	fmt.Printf("session start: pinfold session start cold and warm (pool) vs kubectl run + wait Ready (%d rounds)\n"+
		"  kubectl %.3f s [%.3f..%.3f]\n  cold    %.3f s [%.3f..%.3f]  ratio %.2f\n  warm    %.3f s [%.3f..%.3f]  ratio %.2f\n", rounds,
		median(tk), min(tk), max(tk), median(tc), min(tc), max(tc), median(rc), median(tw), min(tw), max(tw), median(rw))

	// Exec into a running session.
	ready()
	if err := start(true)(); err != nil {
		fail(err)
	}
	id := ids[len(ids)-1]
	pexec := func(extra ...string) func() error {
		return func() error {
			c := exec.Command(bin, "exec", id, "--", "true")
			c.Env = append(env, extra...)
			if b, err := c.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, b)
			}
			return nil
		}
	}
	report("session exec: pinfold exec SESSION -- true vs kubectl exec POD -- true", rounds*3, pexec(), kexec)
	serve := exec.Command(bin, "serve")
	serve.Env = env
	if err := serve.Start(); err != nil {
		fail(err)
	}
	defer func() { serve.Process.Signal(os.Interrupt); serve.Wait() }()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(store, "api.sock")); err == nil {
			break
		}
		if time.Now().After(end) {
			fail(fmt.Errorf("pinfold serve did not listen"))
		}
	}
	report("session exec through pinfold serve (PINFOLD_HOST) vs kubectl exec POD -- true", rounds*3,
		pexec("PINFOLD_HOST=unix://"+filepath.Join(store, "api.sock")), kexec)
}

// report runs a and b paired for rounds and prints their medians and
// the median of the per-round ratios.
func report(title string, rounds int, a, b func() error) {
	// One of each first, not counted: images, caches, connections.
	if err := a(); err != nil {
		fail(err)
	}
	if err := b(); err != nil {
		fail(err)
	}
	var ta, tb, ratios []float64
	for i := 0; i < rounds; i++ {
		order := []func() error{a, b}
		if i%2 == 1 {
			order = []func() error{b, a}
		}
		var d [2]float64
		for j, f := range order {
			start := time.Now()
			if err := f(); err != nil {
				fail(err)
			}
			d[j] = time.Since(start).Seconds()
		}
		if i%2 == 1 {
			d[0], d[1] = d[1], d[0]
		}
		ta, tb, ratios = append(ta, d[0]), append(tb, d[1]), append(ratios, d[0]/d[1])
	}
	fmt.Printf("%s (%d rounds)\n  pinfold %.3f s [%.3f..%.3f]  kubectl %.3f s [%.3f..%.3f]  ratio %.2f\n", title, rounds,
		median(ta), min(ta), max(ta), median(tb), min(tb), max(tb), median(ratios))
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func min(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		if x < m {
			m = x
		}
	}
	return m
}

func max(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		if x > m {
			m = x
		}
	}
	return m
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/kubernetes:", strings.TrimSpace(err.Error()))
	os.Exit(1)
}

// restricted are kubectl run's flags that make its pod pass Pod Security
// "restricted" (in a namespace that enforces it), else none.
func restricted(name, level string) []string {
	if level != "restricted" {
		return nil
	}
	o := fmt.Sprintf(`{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":1000,"seccompProfile":{"type":"RuntimeDefault"}},`+
		`"containers":[{"name":%q,"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}`, name)
	return []string{"--override-type=strategic", "--overrides=" + o}
}

// interrupt measures how long a SIGINT to `pinfold run` takes to reach
// the command in its pod: the command traps it and prints a line, which
// is timed from the signal.
func interrupt(bin, image, ws string, env []string, rounds int) {
	var ts []float64
	for i := 0; i < rounds+1; i++ {
		c := exec.Command(bin, "run", "--backend", "kubernetes", "--base", "oci:"+image, "--access", "none", "--",
			"sh", "-c", `trap 'echo got-int; exit 3' INT; echo up; while :; do sleep 0.01; done`)
		c.Dir, c.Env = ws, env
		out, err := c.StdoutPipe()
		if err != nil {
			fail(err)
		}
		if err := c.Start(); err != nil {
			fail(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		expect := func(want string) {
			select {
			case l := <-lines:
				if l != want {
					fail(fmt.Errorf("the interrupted command said %q, not %q", l, want))
				}
			case <-time.After(60 * time.Second):
				fail(fmt.Errorf("the interrupted command did not say %q", want))
			}
		}
		expect("up")
		time.Sleep(200 * time.Millisecond)
		t0 := time.Now()
		c.Process.Signal(os.Interrupt)
		expect("got-int")
		d := time.Since(t0).Seconds()
		for range lines {
		}
		c.Wait()
		if i > 0 { // the first not counted
			ts = append(ts, d)
		}
	}
	fmt.Printf("Ctrl-C: SIGINT to pinfold run until the command in the pod has it (%d rounds)\n  %.3f s [%.3f..%.3f]\n",
		rounds, median(ts), min(ts), max(ts))
}
