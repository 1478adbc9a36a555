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

// TestObjectsConfine checks the pod's confinement, where the
// environment's values go, and network none's two layers.
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
	var netoff *corev1.Container
	for i, c := range sp.Containers {
		if c.Name == netName {
			netoff = &sp.Containers[i]
			continue
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
	if netoff == nil || len(netoff.SecurityContext.Capabilities.Add) != 1 || netoff.SecurityContext.Capabilities.Add[0] != "NET_ADMIN" ||
		*netoff.SecurityContext.AllowPrivilegeEscalation || !*netoff.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("network none has no confined link-down container: %+v", netoff)
	}
	if pol == nil || len(pol.Spec.Egress) != 0 || len(pol.Spec.Ingress) != 0 || len(pol.Spec.PolicyTypes) != 2 {
		t.Errorf("network none's policy: %+v", pol)
	}
	// Changeset access: the workspace is writable in main, staged in copy.
	var ws bool
	for _, m := range sp.Containers[0].VolumeMounts {
		if m.MountPath == "/ws" && !m.ReadOnly {
			ws = true
		}
	}
	if !ws || len(sp.Containers) != 3 {
		t.Errorf("workspace mounts: %+v", sp.Containers)
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
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
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
