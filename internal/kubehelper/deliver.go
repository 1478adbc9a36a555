package kubehelper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
)

// A cold session's pod gets its agent and a small workspace through its
// own volumes rather than an exec after main runs (an exec's round trip
// through the API server and the kubelet was most of what a cold start
// spent beyond kubectl's): the agent in immutable ConfigMaps shared by
// every session of the namespace, named by the agent's hash, the
// workspace as a tar in a ConfigMap of the session's, created before the
// pod and deleted with it. main's own command assembles the agent,
// checks its sha512 and unpacks the workspace before it sleeps.
const (
	// partSize keeps each of the agent's ConfigMaps under the API
	// server's 1 MiB for a ConfigMap's data.
	partSize = 1000 << 10
	// wsVolumeMax bounds the workspace's tar carried in a ConfigMap; a
	// larger one is copied by exec, as the agent then is.
	wsVolumeMax = 512 << 10
	// labelAgent names the agent's ConfigMaps (its hash); they carry no
	// owner label: they outlive the session that made them.
	labelAgent = "pinfold.agent"
	// inDir is where main sees the volume of those ConfigMaps.
	inDir = stage + "/in"
)

// errTooBig: the workspace's tar is over wsVolumeMax.
var errTooBig = errors.New("the workspace is over 512 KiB as a tar")

// cappedBuffer fails a write past max.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, errTooBig
	}
	return b.Buffer.Write(p)
}

// deliverable reports whether the pod may get its agent and workspace
// through volumes: a cold session's pod whose main unpacks (no read-only
// workspace, no copied mounts) and that runs the agent from its own
// directory; PINFOLD_KUBE_DELIVERY=exec keeps the copy by exec.
func (s *session) deliverable() bool {
	r := &s.req
	return r.Session != nil && !s.pooling && !s.warm && r.Session.AgentImage == "" && !r.WorkspaceParent &&
		s.copier() == mainName && os.Getenv("PINFOLD_KUBE_DELIVERY") != "exec"
}

// attachable reports whether main, given its files through its volumes,
// runs the agent itself and serves the session's first connection on an
// attach to it (no exec after main runs: an exec's start, runc exec in
// the pod, is what an attach spares); PINFOLD_KUBE_ATTACH=off keeps the
// agent's exec and the bridge's exec spare.
func (s *session) attachable() bool {
	r := &s.req
	return len(r.Args) > 1 && os.Getenv("PINFOLD_KUBE_ATTACH") != "off"
}

// warmAgent reports whether a session's pod runs the agent in main, for
// the session's attach (agentMain): a pool's pod, whose claimer attaches,
// and a cold one whose files are copied by exec (deliver's pods run it
// from their own command). The pool's keeper and the claimer build the
// same pod, the keeper from a template without the session's arguments,
// so the agent's are the engine's own (agentArgs).
func (s *session) warmAgent() bool {
	r := &s.req
	if r.Session == nil || r.WorkspaceParent || r.Session.AgentImage != "" || s.copier() != mainName || os.Getenv("PINFOLD_KUBE_ATTACH") == "off" {
		return false
	}
	return r.Args == nil || slices.Equal(r.Args[1:], agentArgs)
}

// agentArgs are the arguments the engine gives a session's agent.
var agentArgs = []string{agent.AgentCommand, "0"}

// agentMain is main's command in a pod a pool may hold: once the agent's
// binary is in (the keeper's copy, or a cold start's), the agent, which
// waits for an attach (agent.EnvAttach; a session that does not attach
// runs its own by exec, and this one serves nothing); its status for the
// bridge's wait; then sleep, as main does otherwise.
func agentMain(netoff bool) []string {
	script := `while [ ! -e "$0" ]; do sleep 0.01 2>/dev/null || sleep 1; done
a=$1; shift
"$a" "$@"
s=$?; f=` + kube.SessionRun + `/` + agent.StatusFile + `
rm -rf "$f" "$f.w"; echo $s > "$f.w" && mv -f "$f.w" "$f"
exec sleep 2147483647`
	args := append(append([]string(nil), agentArgs...), agent.EnvAttach, stage)
	if netoff {
		args = append(args, agent.AttachLinks)
	}
	return append([]string{"/bin/sh", "-c", script, kube.AgentDir + "/" + agentDone, kube.AgentDir + "/" + agentFile}, args...)
}

// deliver makes the ConfigMaps pod needs (the agent's, when the namespace
// lacks them; the workspace's) and changes pod to mount them and unpack
// them in main. It returns the workspace's ConfigMap, which the caller
// owns (nil: none); on an error nothing is changed and the copy is by
// exec.
func (s *session) deliver(ctx context.Context, pod *corev1.Pod) (*corev1.ConfigMap, error) {
	r, c := &s.req, s.c
	bin, err := os.ReadFile(agentBinary(r.Session.Agent))
	if err != nil {
		return nil, err
	}
	// The ConfigMaps are named by the sha256; the pod checks the sha512,
	// which busybox computes twice as fast (~30 against ~70 ms for the
	// 3 MB agent on the kit's loaded node: on the session's path).
	sum := sha256.Sum256(bin)
	agentHash := hex.EncodeToString(sum[:])[:16]
	sum512 := make(chan string, 1)
	go func() {
		h := sha512.Sum512(bin)
		sum512 <- hex.EncodeToString(h[:])
	}()
	var ws []byte
	if r.Workspace != "" && r.Access != "none" {
		b := &cappedBuffer{max: wsVolumeMax}
		if err := kube.WriteTar(b, []kube.Dir{{Src: r.Workspace, Name: s.wsStage()}}); err != nil {
			return nil, err
		}
		ws = b.Bytes()
	}
	// The workspace's ConfigMap is created while the agent's are looked
	// for (two round trips to the API server side by side).
	var cm *corev1.ConfigMap
	t := true
	made := make(chan error, 1)
	if ws != nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: pod.Labels}, Immutable: &t,
			BinaryData: map[string][]byte{"ws": ws}}
		go func() {
			_, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{})
			made <- err
		}()
	} else {
		made <- nil
	}
	parts, err := s.agentMaps(ctx, bin, agentHash)
	werr := <-made
	if err != nil || werr != nil {
		if werr == nil && cm != nil {
			c.cs.CoreV1().ConfigMaps(c.ns).Delete(context.WithoutCancel(ctx), cm.Name, metav1.DeleteOptions{})
		}
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("creating the workspace's configmap: %w", werr)
	}
	s.mark("agent's configmaps there")
	sources := make([]corev1.VolumeProjection, 0, len(parts)+1)
	var files []string
	for i, name := range parts {
		p := "a" + strconv.Itoa(i)
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: []corev1.KeyToPath{{Key: "part", Path: p}}}})
		files = append(files, inDir+"/"+p)
	}
	wsSum := ""
	if ws != nil {
		s.mark("workspace's configmap created")
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, Items: []corev1.KeyToPath{{Key: "ws", Path: "ws"}}}})
		h := sha512.Sum512(ws)
		wsSum = hex.EncodeToString(h[:])
	}
	mode := int32(0o444)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "in", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources, DefaultMode: &mode}}})
	for i := range pod.Spec.Containers {
		ct := &pod.Spec.Containers[i]
		if ct.Name != mainName {
			continue
		}
		ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "in", MountPath: inDir, ReadOnly: true})
		ct.Command = append([]string{"/bin/sh", "-c", unpackScript(stage), <-sum512, wsSum, "pinfold-agent-" + agentHash, strconv.Itoa(len(files))}, files...)
		if s.attachable() {
			// main's command ends in the agent, whose first connection is
			// an attach to main (openAttach): its stdin is the attach's.
			ct.Command = append(ct.Command, r.Args[1:]...)
			ct.Command = append(ct.Command, agent.EnvAttach, stage)
			if r.NetOff {
				ct.Command = append(ct.Command, agent.AttachLinks)
			}
			ct.Stdin, ct.StdinOnce = true, true
			s.attaching = true
		}
		// The script's complaint is the pod's status, which the start
		// reports.
		ct.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}
	s.delivered = true
	return cm, nil
}

// unpackScript is main's command when the pod gets its agent and
// workspace through volumes (root: the stage, where main sees them): $0
// the agent's sha512, $1 the workspace tar's (or ""), $2 the agent's
// ConfigMaps' name (without the part's number), $3 how many of the
// agent's parts follow, then those parts in order, then the agent's
// arguments when main runs the agent itself (attach mode). The agent's
// hash is checked in the pod, against the bytes the kubelet mounted:
// whoever replaced a ConfigMap of the agent's gets a pod that refuses to
// start, not a session running what they wrote. It exits 97 with its
// reason; once all is in, it writes the marker the agent's exec and the
// bridge wait for (awaitAgent). It writes nothing to stdout: in attach
// mode the attach reads it. Then it runs the agent (attach mode; its
// status into the run directory, for the bridge's wait) and sleeps, as
// main does otherwise, so that the workspace can still be packed.
func unpackScript(root string) string {
	return `die() { echo "pinfold: $*" >&2; exit 97; }
want=$0 wssum=$1 name=$2 n=$3; shift 3
a=` + root + `/agent/` + agentFile + `
: > "$a" || die "cannot write the agent to $a"
while [ "$n" -gt 0 ]; do
	cat "$1" >> "$a" || die "cannot assemble the agent from its configmaps in $a"
	shift; n=$((n-1))
done
got=$(sha512sum "$a") || die "the image has no sha512sum to check the agent with (PINFOLD_KUBE_DELIVERY=exec copies it by exec)"
[ "${got%% *}" = "$want" ] || die "the agent in configmaps $name-* is not pinfold's (sha512 ${got%% *}, not $want)"
chmod 755 "$a" || die "cannot make the agent executable"
if [ -n "$wssum" ]; then
	got=$(sha512sum ` + root + `/in/ws) && [ "${got%% *}" = "$wssum" ] || die "the workspace's configmap is not the one pinfold made"
	(umask 0 && exec tar -x -f ` + root + `/in/ws -C ` + root + `) || die "cannot unpack the workspace (tar)"
fi
: > ` + root + `/agent/` + agentDone + ` || die "cannot write the agent's marker"
if [ $# -gt 0 ]; then
	"$a" "$@"
	s=$?; f=` + root + `/run/` + agent.StatusFile + `
	rm -rf "$f" "$f.w"; echo $s > "$f.w" && mv -f "$f.w" "$f"
fi
exec sleep 2147483647`
}

// agentMaps makes sure the namespace holds the agent's ConfigMaps
// (pinfold-agent-HASH-N, immutable) and returns their names. Which exist
// is one metadata list; the missing ones are created. Their content is
// not trusted here: the pod checks the agent's hash (unpackScript).
func (s *session) agentMaps(ctx context.Context, bin []byte, hash string) ([]string, error) {
	c := s.c
	var names []string
	for i := 0; i*partSize < len(bin); i++ {
		names = append(names, "pinfold-agent-"+hash+"-"+strconv.Itoa(i))
	}
	mc, err := metadata.NewForConfig(c.cfg)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	list, err := mc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(c.ns).List(ctx,
		metav1.ListOptions{LabelSelector: labelAgent + "=" + hash})
	if err != nil {
		return nil, fmt.Errorf("listing the agent's configmaps: %w", err)
	}
	for _, m := range list.Items {
		if m.DeletionTimestamp == nil {
			have[m.Name] = true
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	t := true
	for i, name := range names {
		if have[name] {
			continue
		}
		part := bin[i*partSize : min(len(bin), (i+1)*partSize)]
		wg.Go(func() {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{labelAgent: hash, "app.kubernetes.io/managed-by": "pinfold"}},
				Immutable: &t, BinaryData: map[string][]byte{"part": part}}
			_, err := c.cs.CoreV1().ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				errs[i] = fmt.Errorf("creating the agent's configmap %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return names, nil
}

// deliveryNote is why a session's pod gets its files by exec, for the
// trace.
func deliveryNote(err error) string {
	return "files by exec: " + strings.TrimSpace(err.Error())
}
