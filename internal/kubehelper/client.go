package kubehelper

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/internal/procstat"
)

// client is the cluster and namespace the helper works in.
type client struct {
	cfg *rest.Config
	cs  *kubernetes.Clientset
	ns  string
}

// connect reads the kubeconfig (PINFOLD_KUBECONFIG, else KUBECONFIG and
// ~/.kube/config as kubectl does, else the pod's in-cluster account) and
// the namespace (PINFOLD_KUBE_NAMESPACE, else the context's, else
// "default").
func connect(kubeconfig, ns string) (*client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no usable kubeconfig: %w", err)
	}
	if ns == "" {
		if n, _, err := cc.Namespace(); err == nil && n != "" {
			ns = n
		} else {
			ns = "default"
		}
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "pinfold-kube"
	// The helper's stderr is the command's: the API server's warnings
	// and client-go's logs must not land in it.
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &client{cfg: cfg, cs: cs, ns: ns}, nil
}

func envConnect() (*client, error) {
	return connect(os.Getenv("PINFOLD_KUBECONFIG"), os.Getenv("PINFOLD_KUBE_NAMESPACE"))
}

// check reports whether the cluster answers and the namespace may hold
// pinfold's pods: one line of JSON, {"ok":true} or {"error":...}.
func check() int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(map[string]any{"error": err.Error()})
		return 1
	}
	c, err := envConnect()
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.cs.Discovery().ServerVersion()
	if err != nil {
		return fail(fmt.Errorf("the API server does not answer: %w", err))
	}
	if _, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: kube.LabelOwner}); err != nil {
		return fail(fmt.Errorf("cannot list pods in namespace %s: %w", c.ns, err))
	}
	out.Encode(map[string]any{"ok": true, "server": v.GitVersion, "namespace": c.ns})
	return 0
}

// leftovers lists (and with remove, deletes) the pods, secrets,
// configmaps (a session's workspace; the agent's are the namespace's,
// shared, and stay) and network policies of pinfold processes of this host that are gone, one
// "kind/name" per line.
func leftovers(remove bool) int {
	c, err := envConnect()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, _ := os.Hostname()
	sel := kube.LabelOwner + "," + kube.LabelHost + "=" + labelValue(host)
	opts := metav1.ListOptions{LabelSelector: sel}
	gone := func(m metav1.ObjectMeta) bool { return !ownerAlive(m.Labels[kube.LabelOwner]) }
	var found []string
	del := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube: listing pods:", err)
		return 1
	}
	for _, p := range pods.Items {
		if gone(p.ObjectMeta) {
			found = append(found, "pod/"+p.Name)
			if remove {
				c.cs.CoreV1().Pods(c.ns).Delete(ctx, p.Name, del)
			}
		}
	}
	secrets, err := c.cs.CoreV1().Secrets(c.ns).List(ctx, opts)
	if err == nil {
		for _, s := range secrets.Items {
			if gone(s.ObjectMeta) {
				found = append(found, "secret/"+s.Name)
				if remove {
					c.cs.CoreV1().Secrets(c.ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
				}
			}
		}
	}
	maps, err := c.cs.CoreV1().ConfigMaps(c.ns).List(ctx, opts)
	if err == nil {
		for _, m := range maps.Items {
			if gone(m.ObjectMeta) {
				found = append(found, "configmap/"+m.Name)
				if remove {
					c.cs.CoreV1().ConfigMaps(c.ns).Delete(ctx, m.Name, metav1.DeleteOptions{})
				}
			}
		}
	}
	pols, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).List(ctx, opts)
	if err == nil {
		for _, np := range pols.Items {
			if gone(np.ObjectMeta) {
				found = append(found, "networkpolicy/"+np.Name)
				if remove {
					c.cs.NetworkingV1().NetworkPolicies(c.ns).Delete(ctx, np.Name, metav1.DeleteOptions{})
				}
			}
		}
	}
	for _, f := range found {
		fmt.Println(f)
	}
	return 0
}

// ownerAlive reports whether the pinfold process a label names runs here.
func ownerAlive(owner string) bool {
	pid, start, ok := strings.Cut(owner, "-")
	if !ok {
		return false
	}
	p, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	st := procstat.StartTime(p)
	return st != 0 && strconv.FormatUint(st, 10) == start
}

// labelValue makes s a valid label value (63 characters of [A-Za-z0-9-_.]).
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	s = strings.Trim(string(b), "-_.")
	if len(s) > 63 {
		s = strings.Trim(s[:63], "-_.")
	}
	return s
}

// execCmd runs a command in a running pod's first container with this
// process's streams, through the same exec path as a run's command.
func execCmd(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "usage: pinfold-kube exec POD -- COMMAND [ARG...]")
		return 2
	}
	c, err := envConnect()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube:", err)
		return 1
	}
	s := &session{c: c, pod: args[0]}
	code, err := s.exec(context.Background(), "", args[2:], nil, os.Stdout, os.Stderr, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube:", err)
		return 1
	}
	return code
}
