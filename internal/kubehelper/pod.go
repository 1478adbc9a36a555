package kubehelper

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pinfold/pinfold/internal/kube"
)

// podReady reports whether every container of p runs, or an error when
// it never will.
func podReady(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s ended before the command ran (%s): %s", p.Name, p.Status.Phase, statusDetail(p))
	}
	for _, st := range p.Status.InitContainerStatuses {
		if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
			return false, fmt.Errorf("pod %s: init container %s failed (%d %s): %s", p.Name, st.Name, t.ExitCode, t.Reason, t.Message)
		}
		if err := waitingError(p, st); err != nil {
			return false, err
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		for _, st := range p.Status.ContainerStatuses {
			if err := waitingError(p, st); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	for _, st := range p.Status.ContainerStatuses {
		if err := waitingError(p, st); err != nil {
			return false, err
		}
		if st.Name == netName {
			// It exits once it has done its work; linksDown checks that.
			if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
				return false, fmt.Errorf("pod %s: container %s, which takes the links down, failed (%d %s): %s", p.Name, st.Name, t.ExitCode, t.Reason, t.Message)
			}
			continue
		}
		if st.State.Running == nil {
			return false, nil
		}
	}
	return len(p.Status.ContainerStatuses) > 0, nil
}

func waitingError(p *corev1.Pod, st corev1.ContainerStatus) error {
	w := st.State.Waiting
	if w == nil {
		return nil
	}
	// The kubelet retries a container whose config waited on its caches
	// (the secret holding the command's environment, say): that is not
	// a container that cannot start.
	if strings.Contains(w.Message, "failed to sync") {
		return nil
	}
	switch w.Reason {
	case "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerError", "CreateContainerConfigError", "RunContainerError":
		return fmt.Errorf("pod %s: container %s cannot start: %s: %s", p.Name, st.Name, w.Reason, w.Message)
	}
	return nil
}

func statusDetail(p *corev1.Pod) string {
	var parts []string
	for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if t := st.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("%s exited %d %s %s", st.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		}
	}
	if len(parts) == 0 {
		return p.Status.Reason + " " + p.Status.Message
	}
	return strings.Join(parts, "; ")
}

// objects builds the run's pod, and the secret (environment values and
// secret files) and network policy it needs.
func (s *session) objects() (*corev1.Pod, *corev1.Secret, *networkingv1.NetworkPolicy, error) {
	r := &s.req
	if r.NetworkNone == r.NetworkAllow {
		// Either is a limit; a request without one would get the
		// cluster's whole network.
		return nil, nil, nil, errors.New("the request names no network mode (none or allow)")
	}
	labels := map[string]string{kube.LabelOwner: r.Owner, kube.LabelHost: labelValue(r.Host), kube.LabelID: r.ID,
		"app.kubernetes.io/managed-by": "pinfold"}
	name := "pinfold-" + r.ID
	f, t := false, true
	uid, gid := r.UID, r.GID
	pull := corev1.PullPolicy(r.PullPolicy)
	restricted := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &t,
			AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Privileged: &f,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string][]byte{}}
	vols, mainMounts, copyMounts, err := s.volumes(name, secret)
	if err != nil {
		return nil, nil, nil, err
	}
	// The environment's values are the secret's, not the pod's: whoever
	// may read pods does not read them.
	var env []corev1.EnvVar
	for i, kv := range r.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		key := "e" + strconv.Itoa(i)
		secret.Data[key] = []byte(v)
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}})
	}
	dir := r.Dir
	if dir == "" {
		dir = "/"
	}
	if r.WorkspaceParent && r.Session != nil {
		// The agent gives each command its directory; the pod's own is
		// the same for all the parent's workspaces.
		dir = path.Dir(r.Workspace)
	}
	main := corev1.Container{Name: mainName, Image: r.Image, ImagePullPolicy: pull, Command: holder, Env: env, WorkingDir: dir,
		VolumeMounts: mainMounts, SecurityContext: restricted(), Stdin: false, TTY: false}
	if s.warmAgent() {
		main.Command, main.Stdin, main.StdinOnce = agentMain(r.NetOff), true, true
		s.mainAgent = true
	}
	if r.Memory > 0 || r.CPUs > 0 {
		main.Resources.Limits = corev1.ResourceList{}
		if r.Memory > 0 {
			main.Resources.Limits[corev1.ResourceMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
		}
		if r.CPUs > 0 {
			main.Resources.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(r.CPUs*1000+0.5), resource.DecimalSI)
		}
	}
	// The kubelet starts a pod's containers one after the other, in this
	// order: the copier first (copy, else main), whose copy-in then runs
	// while the others start; netoff last (the command starts once main
	// sees the links down, whatever the order).
	var containers []corev1.Container
	if len(copyMounts) > 0 && s.copier() == mainName {
		main.VolumeMounts = append(main.VolumeMounts, copyMounts...)
	} else if len(copyMounts) > 0 {
		containers = append(containers, corev1.Container{Name: copyName, Image: r.Image, ImagePullPolicy: pull, Command: holder,
			WorkingDir: "/", VolumeMounts: copyMounts, SecurityContext: restricted(),
			// tar needs little, but the page cache of what it writes is
			// charged to it too: room, without asking the scheduler for it.
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}})
	}
	nw := s.network(name, labels, pull)
	if nw.container != nil && s.mainAgent {
		// Before main: its links are down by the time main's agent
		// looks (it serves nothing until they are), so that a session's
		// start waits for netoff's start, not for its end after main's.
		containers = append(containers, *nw.container)
	}
	containers = append(containers, main)
	if nw.container != nil && !s.mainAgent {
		containers = append(containers, *nw.container)
	}
	term := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: s.serverPod(),
			// kubectl exec and logs default to it.
			Annotations: map[string]string{"kubectl.kubernetes.io/default-container": mainName}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			TerminationGracePeriodSeconds: &term,
			Hostname:                      r.Hostname,
			HostAliases:                   nw.aliases,
			DNSPolicy:                     nw.dnsPolicy,
			DNSConfig:                     nw.dnsConfig,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: containers,
			Volumes:    vols,
		},
	}
	// The cluster's own end for the pod, should the helper be killed:
	// the timeout's and 5 minutes, else the default deadline.
	if d := r.DeadlineS; r.TimeoutMS > 0 {
		d = (r.TimeoutMS+999)/1000 + 300
		pod.Spec.ActiveDeadlineSeconds = &d
	} else if d > 0 {
		pod.Spec.ActiveDeadlineSeconds = &d
	}
	if len(secret.Data) == 0 {
		secret = nil
	}
	return pod, secret, nw.policy, nil
}

// copier is the container that unpacks and packs the pod's copies: one of
// its own (copy) only where main must not write what it gets, a read-only
// workspace or mount; else main, with the copies' volumes at the stage
// too, which spares the kubelet a container's start (it starts a pod's
// containers one after another). A session's agent is then writable in
// main: the agent runs as the command's user in the command's container,
// which could trace it anyway.
func (s *session) copier() string {
	r := &s.req
	if r.Workspace != "" && r.Access == "ro" {
		return copyName
	}
	for _, m := range r.Mounts {
		if !m.File {
			return copyName
		}
	}
	return mainName
}

// volumes are the pod's volumes and the mounts of its main and copy
// containers: /tmp, the workspace, the copied mounts (a file's content
// goes into secret), a session's directories.
func (s *session) volumes(name string, secret *corev1.Secret) (vols []corev1.Volume, mainMounts, copyMounts []corev1.VolumeMount, err error) {
	r := &s.req
	tmp := resource.NewQuantity(r.TmpSize, resource.BinarySI)
	vols = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}}}
	mainMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	if r.Workspace != "" && r.Access != "none" {
		vols = append(vols, corev1.Volume{Name: "ws", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		at := r.Workspace
		if r.WorkspaceParent {
			at = path.Dir(r.Workspace)
		}
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: "ws", MountPath: at, ReadOnly: r.Access == "ro"})
		copyMounts = append(copyMounts, corev1.VolumeMount{Name: "ws", MountPath: stage + "/ws"})
	}
	var secretItems []corev1.KeyToPath
	for i, m := range r.Mounts {
		v := "m" + strconv.Itoa(i)
		if m.File {
			if !m.ReadOnly {
				return nil, nil, nil, fmt.Errorf("mount %s: a file is carried in a Secret, which is read-only", m.Target)
			}
			b, err := os.ReadFile(m.Source)
			if err != nil {
				return nil, nil, nil, err
			}
			secret.Data["f"+strconv.Itoa(i)] = b
			secretItems = append(secretItems, corev1.KeyToPath{Key: "f" + strconv.Itoa(i), Path: "f" + strconv.Itoa(i)})
			mainMounts = append(mainMounts, corev1.VolumeMount{Name: "files", MountPath: m.Target, SubPath: "f" + strconv.Itoa(i), ReadOnly: true})
			continue
		}
		if !m.ReadOnly {
			return nil, nil, nil, fmt.Errorf("mount %s: only read-only mounts are copied into a pod", m.Target)
		}
		vols = append(vols, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: v, MountPath: m.Target, ReadOnly: true})
		copyMounts = append(copyMounts, corev1.VolumeMount{Name: v, MountPath: stage + "/" + v})
	}
	if r.Session != nil {
		// A session's pod: pinfold's binary (copied in, read-only in
		// main), the agent's run directory and the session's home.
		for _, v := range []string{"agent", "run", "home"} {
			vols = append(vols, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: "agent", MountPath: kube.AgentDir, ReadOnly: true},
			corev1.VolumeMount{Name: "run", MountPath: kube.SessionRun}, corev1.VolumeMount{Name: "home", MountPath: kube.SessionHome})
		if img := r.Session.AgentImage; img != "" {
			// The agent from the operator's image (read-only, the node's
			// runtime's), nothing to copy.
			vols[len(vols)-3].VolumeSource = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: img, PullPolicy: corev1.PullPolicy(r.PullPolicy)}}
		} else {
			copyMounts = append(copyMounts, corev1.VolumeMount{Name: "agent", MountPath: stage + "/agent"})
		}
	}
	if len(secretItems) > 0 {
		mode := int32(0o444)
		vols = append(vols, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: name, Items: secretItems, DefaultMode: &mode}}})
	}
	return vols, mainMounts, copyMounts, nil
}

// podNetwork is what the run's network mode adds to its pod.
type podNetwork struct {
	container *corev1.Container // one more, after main and copy
	policy    *networkingv1.NetworkPolicy
	aliases   []corev1.HostAlias
	dnsPolicy corev1.DNSPolicy
	dnsConfig *corev1.PodDNSConfig
}

// network is what the run's network mode (none or allow) adds to its pod.
func (s *session) network(name string, labels map[string]string, pull corev1.PullPolicy) podNetwork {
	r := &s.req
	f, t := false, true
	var nw podNetwork
	if r.NetworkNone {
		// Network none is a deny-all policy, which the cluster's plugin
		// enforces (PINFOLD_KUBE_NETWORK_POLICY=enforced); every container
		// passes Pod Security "restricted". Where the plugin enforces no
		// policy, NetOff adds a container with CAP_NET_ADMIN alone (and
		// otherwise confined) that takes every link but loopback down and
		// exits; the command is started only once main sees them down
		// (linksDown), and no container that stays holds a capability to
		// bring one up. It runs as root with a capability: only a namespace
		// at Pod Security "privileged" admits it.
		if r.NetOff {
			root, nonRoot := int64(0), false
			nw.container = &corev1.Container{Name: netName, Image: r.Image, ImagePullPolicy: pull,
				Command: []string{"sh", "-c", `set -e; for l in $(ls /sys/class/net); do [ "$l" = lo ] || ip link set "$l" down; done; ! ip -o link show up | grep -v ': lo:'`},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: &nonRoot, AllowPrivilegeEscalation: &f,
					ReadOnlyRootFilesystem: &t, Privileged: &f,
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}
		}
		nw.policy = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelID: r.ID}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
	}
	if r.NetworkAllow {
		// Network allow: the policy lets the pod reach the allowed
		// addresses alone; their names are in its /etc/hosts, and its
		// resolver is a loopback address where nothing answers.
		var to []networkingv1.NetworkPolicyPeer
		for _, b := range r.Egress {
			to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: b.CIDR, Except: b.Except}})
		}
		spec := networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelID: r.ID}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
		if len(to) > 0 {
			spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: to}}
		}
		nw.policy = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}
		for _, h := range r.Hosts {
			for _, a := range h.Addrs {
				nw.aliases = append(nw.aliases, corev1.HostAlias{IP: a, Hostnames: []string{h.Name}})
			}
		}
		nw.dnsPolicy = corev1.DNSNone
		nw.dnsConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	}
	return nw
}

// serverPod is the owner reference of pinfold's own pod, when pinfold
// runs in one (PINFOLD_KUBE_OWNER_POD, _UID and _NAMESPACE, from the
// downward API: deploy/kubernetes/serve.yaml) in the namespace of the
// pods it makes: they are then deleted by the garbage collector with it,
// however it ended. In another namespace an owner reference would read as
// a missing owner (and the pod be deleted at once), so there is none.
func (s *session) serverPod() []metav1.OwnerReference {
	name, uid, ns := os.Getenv("PINFOLD_KUBE_OWNER_POD"), os.Getenv("PINFOLD_KUBE_OWNER_UID"), os.Getenv("PINFOLD_KUBE_OWNER_NAMESPACE")
	if name == "" || uid == "" || s.c == nil || ns != s.c.ns {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}}
}
