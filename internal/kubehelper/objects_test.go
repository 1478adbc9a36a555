package kubehelper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinfold/pinfold/internal/kube"
)

func baseRequest() kube.Request {
	return kube.Request{ID: "abc", Owner: "1-2", Host: "h", Image: "img:1", UID: 1000, GID: 1000, Args: []string{"true"},
		Env: []string{"PATH=/bin", "TOKEN=s3cr3t"}, Dir: "/ws", TmpSize: 1 << 30, NetworkNone: true, Workspace: "/ws", Access: "changeset"}
}

// restrictedViolations lists what in pod Pod Security "restricted"
// forbids (the rules of the standard that a pod of pinfold's could break;
// the kit's cluster enforces the whole of it in the conformance test).
func restrictedViolations(pod *corev1.Pod) []string {
	var bad []string
	sp := &pod.Spec
	if sp.HostNetwork || sp.HostPID || sp.HostIPC {
		bad = append(bad, "host namespaces")
	}
	for _, v := range sp.Volumes {
		if v.EmptyDir == nil && v.Secret == nil && v.ConfigMap == nil && v.Projected == nil && v.DownwardAPI == nil {
			bad = append(bad, "volume "+v.Name+" of a kind restricted forbids")
		}
	}
	podNonRoot := sp.SecurityContext != nil && sp.SecurityContext.RunAsNonRoot != nil && *sp.SecurityContext.RunAsNonRoot
	podSeccomp := sp.SecurityContext != nil && sp.SecurityContext.SeccompProfile != nil
	for _, c := range append(append([]corev1.Container(nil), sp.InitContainers...), sp.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			bad = append(bad, c.Name+": no security context")
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad = append(bad, c.Name+": privileged")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad = append(bad, c.Name+": allowPrivilegeEscalation not false")
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			bad = append(bad, c.Name+": capabilities not dropped")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 && (len(sc.Capabilities.Add) > 1 || sc.Capabilities.Add[0] != "NET_BIND_SERVICE") {
			bad = append(bad, c.Name+": adds capabilities")
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsNonRoot == nil && !podNonRoot {
			bad = append(bad, c.Name+": not runAsNonRoot")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			bad = append(bad, c.Name+": runs as uid 0")
		}
		if sc.SeccompProfile == nil && !podSeccomp {
			bad = append(bad, c.Name+": no seccomp profile")
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				bad = append(bad, c.Name+": host port")
			}
		}
	}
	return bad
}

// TestObjectsConfine checks the pod's confinement (Pod Security
// "restricted" for runs, sessions and network allow alike), where the
// environment's values go, and network none's policy.
func TestObjectsConfine(t *testing.T) {
	s := &session{req: baseRequest()}
	pod, secret, pol, err := s.objects()
	if err != nil {
		t.Fatal(err)
	}
	sp := pod.Spec
	if sp.AutomountServiceAccountToken == nil || *sp.AutomountServiceAccountToken || sp.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod spec: %+v", sp)
	}
	if bad := restrictedViolations(pod); len(bad) > 0 {
		t.Errorf("the run's pod breaks Pod Security restricted: %v", bad)
	}
	for _, c := range sp.Containers {
		if c.Name == netName {
			t.Errorf("network none without NetOff has the netoff container")
		}
		sc := c.SecurityContext
		if !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || sc.Capabilities.Drop[0] != "ALL" ||
			len(sc.Capabilities.Add) > 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || *sc.RunAsUser != 1000 {
			t.Errorf("container %s: %+v", c.Name, sc)
		}
		for _, e := range c.Env {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("container %s: variable %s not from the secret", c.Name, e.Name)
			}
		}
	}
	if string(secret.Data["e1"]) != "s3cr3t" {
		t.Errorf("secret: %v", secret.Data)
	}
	if pol == nil || len(pol.Spec.Egress) != 0 || len(pol.Spec.Ingress) != 0 || len(pol.Spec.PolicyTypes) != 2 {
		t.Errorf("network none's policy: %+v", pol)
	}
	// Changeset access: the workspace is writable in main, which copies it
	// in and out itself (no copy container to start).
	var ws, staged bool
	for _, m := range mainOf(t, pod).VolumeMounts {
		if m.MountPath == "/ws" && !m.ReadOnly {
			ws = true
		}
		if m.MountPath == stage+"/ws" && !m.ReadOnly {
			staged = true
		}
	}
	if !ws || !staged || len(sp.Containers) != 1 {
		t.Errorf("workspace mounts: %+v", sp.Containers)
	}
	// A read-only workspace is unpacked by a copy container, which starts
	// first.
	ro := baseRequest()
	ro.Access = "ro"
	rs := &session{req: ro}
	rpod, _, _, err := rs.objects()
	if err != nil {
		t.Fatal(err)
	}
	if cs := rpod.Spec.Containers; len(cs) != 2 || cs[0].Name != copyName || rs.copier() != copyName {
		t.Errorf("a read-only workspace's containers: %+v", cs)
	}
	for _, m := range mainOf(t, rpod).VolumeMounts {
		if m.Name == "ws" && !m.ReadOnly {
			t.Errorf("a read-only workspace is writable in main: %+v", m)
		}
	}
	// A session's pod (the one a warm pool keeps too) is restricted.
	r := baseRequest()
	r.Env, r.Session = nil, &kube.Session{Agent: "/bin/true", Sock: "/tmp/s.sock", Pool: "p"}
	if pod, _, _, err := (&session{req: r}).objects(); err != nil {
		t.Fatal(err)
	} else if bad := restrictedViolations(pod); len(bad) > 0 {
		t.Errorf("a session's pod breaks Pod Security restricted: %v", bad)
	}
	// NetOff: the confined link-down container, which restricted refuses.
	r = baseRequest()
	r.NetOff = true
	pod, _, pol, err = (&session{req: r}).objects()
	if err != nil {
		t.Fatal(err)
	}
	var netoff *corev1.Container
	for i, c := range pod.Spec.Containers {
		if c.Name == netName {
			netoff = &pod.Spec.Containers[i]
		}
	}
	if netoff == nil || len(netoff.SecurityContext.Capabilities.Add) != 1 || netoff.SecurityContext.Capabilities.Add[0] != "NET_ADMIN" ||
		*netoff.SecurityContext.AllowPrivilegeEscalation || !*netoff.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("NetOff has no confined link-down container: %+v", netoff)
	}
	if len(restrictedViolations(pod)) == 0 || pol == nil {
		t.Errorf("the netoff pod passes restricted (the check is broken), or has no policy")
	}
}

// TestObjectsDeadline: every pod has a deadline, should its helper be
// killed: the timeout's and 5 minutes, else the request's default.
func TestObjectsDeadline(t *testing.T) {
	r := baseRequest()
	r.DeadlineS = 86400
	pod, _, _, err := (&session{req: r}).objects()
	if err != nil || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 86400 {
		t.Errorf("no timeout: deadline %v, %v", pod.Spec.ActiveDeadlineSeconds, err)
	}
	r.TimeoutMS = 1500
	pod, _, _, err = (&session{req: r}).objects()
	if err != nil || pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds != 302 {
		t.Errorf("timeout 1.5 s: deadline %v, %v", pod.Spec.ActiveDeadlineSeconds, err)
	}
}

func TestObjectsAllow(t *testing.T) {
	r := baseRequest()
	r.NetworkNone, r.NetworkAllow = false, true
	r.Egress = []kube.Block{{CIDR: "192.0.2.7/32"}, {CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}
	r.Hosts = []kube.Host{{Name: "allowed.test", Addrs: []string{"192.0.2.7"}}}
	s := &session{req: r}
	pod, _, pol, err := s.objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == netName || c.SecurityContext.Capabilities.Add != nil {
			t.Errorf("network allow takes the links down, or adds a capability: %+v", c)
		}
	}
	if pol == nil || len(pol.Spec.Egress) != 1 || len(pol.Spec.Egress[0].To) != 2 || pol.Spec.Egress[0].To[1].IPBlock.Except[0] != "10.1.0.0/16" {
		t.Errorf("allow policy: %+v", pol)
	}
	if len(pod.Spec.HostAliases) != 1 || pod.Spec.HostAliases[0].Hostnames[0] != "allowed.test" || pod.Spec.DNSPolicy != corev1.DNSNone {
		t.Errorf("hosts: %+v %s", pod.Spec.HostAliases, pod.Spec.DNSPolicy)
	}
	// Neither mode: refused, never the cluster's whole network.
	r.NetworkAllow = false
	s = &session{req: r}
	if _, _, _, err := s.objects(); err == nil {
		t.Errorf("a request without a network mode was made into a pod")
	}
}

func TestObjectsMounts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("t0ken"), 0o600)
	r := baseRequest()
	r.Access = "ro"
	r.Mounts = []kube.Mount{{Source: file, Target: "/run/secrets/token", ReadOnly: true, File: true}, {Source: dir, Target: "/data", ReadOnly: true}}
	s := &session{req: r}
	pod, secret, _, err := s.objects()
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["f0"]) != "t0ken" {
		t.Errorf("the secret file is not in the secret: %v", secret.Data)
	}
	got := map[string]bool{}
	for _, m := range mainOf(t, pod).VolumeMounts {
		got[m.MountPath] = m.ReadOnly
	}
	if !got["/run/secrets/token"] || !got["/data"] || !got["/ws"] {
		t.Errorf("main's mounts should be read-only: %v", got)
	}
	r.Mounts = []kube.Mount{{Source: dir, Target: "/data"}}
	s = &session{req: r}
	if _, _, _, err := s.objects(); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a read-write mount: %v", err)
	}
}

// mainOf is the pod's main container, kubectl's default; only the copy
// container, which unpacks while the others start, comes before it.
func mainOf(t *testing.T, pod *corev1.Pod) *corev1.Container {
	t.Helper()
	for i, c := range pod.Spec.Containers {
		if c.Name == mainName {
			if i > 0 && pod.Spec.Containers[0].Name != copyName || i > 1 {
				t.Errorf("main comes after another than copy: %v", pod.Spec.Containers)
			}
			if pod.Annotations["kubectl.kubernetes.io/default-container"] != mainName {
				t.Errorf("main is not kubectl's default container: %v", pod.Annotations)
			}
			return &pod.Spec.Containers[i]
		}
	}
	t.Fatalf("no main container: %v", pod.Spec.Containers)
	return nil
}

// TestWaitingErrorTransient: a container waiting on the kubelet's caches
// (which it retries) is not refused; one that cannot start is.
func TestWaitingErrorTransient(t *testing.T) {
	p := &corev1.Pod{}
	p.Name = "p"
	st := func(reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	if err := waitingError(p, st("CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition")); err != nil {
		t.Errorf("a cache sync the kubelet retries: %v", err)
	}
	if err := waitingError(p, st("CreateContainerConfigError", `secret "x" not found`)); err == nil {
		t.Error("a missing secret was not refused")
	}
	if err := waitingError(p, st("ErrImageNeverPull", "image not present")); err == nil {
		t.Error("an image never pulled was not refused")
	}
}
