package kubehelper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
	"github.com/pinfold/pinfold/internal/procstat"
)

// agentFile is the agent's binary in kube.AgentDir (pinfold-agent, or
// pinfold's own: agentBinary); agentDone is the empty file the copy
// writes after it, which a command started before the copy ended waits
// for (awaitAgent).
const (
	agentFile = "pinfold"
	agentDone = "ready"
)

// agentName is the agent alone (cmd/pinfold-agent), which build.sh puts
// beside pinfold-kube.
const agentName = "pinfold-agent"

// agentBinary is what is copied into a session's pod as its agent:
// pinfold-agent beside this helper, else beside pinfold (pinfold's own
// versions, not one found on PATH); else pinfold's binary, which is the
// agent too but three times the size, and so three times the copy on a
// cold start.
func agentBinary(pinfold string) string {
	dirs := []string{filepath.Dir(pinfold)}
	if exe, err := os.Executable(); err == nil {
		dirs = append([]string{filepath.Dir(exe)}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, agentName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return pinfold
}

// agentExe is the agent's binary in the pod.
func (s *session) agentExe() string {
	if s.req.Session != nil && s.req.Session.AgentImage != "" {
		return kube.AgentDir + "/" + agentName
	}
	return kube.AgentDir + "/" + agentFile
}

// agentIn reports whether the pod has the agent from its start: a warm
// pod's was copied in before the claim, an agent image's is a volume.
func (s *session) agentIn() bool {
	return s.warm || s.req.Session.AgentImage != ""
}

// awaitAgent runs args (the agent's binary and its arguments) once the
// copy has put the binary in: on a cold start the agent and the bridge's
// first spare are started beside the copy, so that their execs' round
// trips through the API server overlap it. The wait is in the pod, a
// shell's poll of the file the copy writes after the binary; sleep 0.01
// is busybox's and coreutils', and a sleep that refuses a fraction makes
// it a second's poll.
func awaitAgent(args []string) []string {
	return awaitFile(kube.AgentDir+"/"+agentDone, args)
}

// awaitFile runs args once the file done exists.
func awaitFile(done string, args []string) []string {
	script := `while [ ! -e "$0" ]; do sleep 0.01 2>/dev/null || sleep 1; done; exec "$@"`
	return append([]string{"/bin/sh", "-c", script, done}, args...)
}

// bridge listens on sock (this machine) and joins every connection to the
// agent's socket in the pod: an exec of the agent's bridge, whose stdin
// and stdout are the connection (the first, when main runs the agent,
// the attach to main: attachAgent). Execs are opened ahead (spares), so that
// a connection, a session's command, does not wait for one through the
// API server. stop closes the listener and removes the socket;
// connections open then end with the pod.
func (s *session) bridge(ctx context.Context, sock, container string) (stop func(), err error) {
	l, err := listenOwner(sock)
	if err != nil {
		return nil, fmt.Errorf("serving the session's socket: %w", err)
	}
	s.spares = make(chan *spare, spares)
	s.spareUp = make(chan struct{})
	took := make(chan struct{}, spares)
	s.took = took
	// One spare first, for the session's first connection (pinfold's
	// ping); the others once it is ready, not competing with it. When
	// main runs the agent, the first is the attach to it (attachAgent),
	// which asks for the others.
	if !s.attaching {
		took <- struct{}{}
	}
	go s.keepSpares(ctx, container, took)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go s.join(ctx, conn.(*net.UnixConn), container, took)
		}
	}()
	return func() { l.Close() }, nil
}

// spares is how many bridge execs are kept open ahead.
const spares = 3

// spare is an exec of the agent's bridge that runs and waits for its
// first input before it connects to the agent (an idle spare is no
// client of the agent's).
type spare struct {
	in   *io.PipeWriter // its stdin
	out  io.Reader      // its stdout, after its ready line
	done chan struct{}  // closed when the exec ended
	end  func()         // ends the stream once out ended (an attach's: nil for an exec)
}

// spareReady offers sp to the bridge's connections; the first ready one
// has the others opened.
func (s *session) spareReady(sp *spare) {
	s.mark("spare ready")
	s.spares <- sp
	s.spareOnce.Do(func() {
		close(s.spareUp)
		for range spares - 1 {
			s.took <- struct{}{}
		}
	})
}

// keepSpares opens a spare for each token on took, side by side, until
// ctx ends; once the first is ready, it opens the others.
func (s *session) keepSpares(ctx context.Context, container string, took chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-took:
		}
		go func() {
			for ctx.Err() == nil {
				if sp := s.openSpare(ctx, container); sp != nil {
					s.spareReady(sp)
					return
				}
				// Not ready (an agent that does not know of spares, a pod
				// that is going): not in a tight loop.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
}

// openSpare starts a bridge exec and returns it once its bridge runs (its
// ready line read), or nil.
func (s *session) openSpare(ctx context.Context, container string) *spare {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sp := &spare{in: inW, out: outR, done: make(chan struct{})}
	go func() {
		args := []string{s.agentExe(), agent.BridgeCommand, agent.BridgeSpare}
		if !s.agentIn() {
			args = awaitAgent(args)
		}
		// A cold start's first spare is opened as the pod starts.
		s.whenStarted(ctx, func() error {
			_, err := s.exec(ctx, container, args, inR, outW, io.Discard, false)
			return err
		})
		outW.Close()
		inR.Close()
		close(sp.done)
	}()
	ready := make(chan bool, 1)
	go func() {
		b := make([]byte, len(agent.BridgeReady))
		_, err := io.ReadFull(outR, b)
		ready <- err == nil && string(b) == agent.BridgeReady
	}()
	select {
	case ok := <-ready:
		if ok {
			return sp
		}
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	inW.Close()
	outR.Close()
	return nil
}

// join runs the agent's bridge in the pod with conn as its streams: the
// end of conn's input is the end of the bridge's stdin (which half-closes
// its connection to the agent), the end of its output closes conn. It
// takes a spare if one is ready (and has another opened), else execs one.
func (s *session) join(ctx context.Context, conn *net.UnixConn, container string, took chan struct{}) {
	defer conn.Close()
	for {
		// A spare being opened is ready sooner than a new exec.
		var sp *spare
		select {
		case sp = <-s.spares:
			took <- struct{}{}
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
		if sp == nil {
			s.exec(ctx, container, []string{s.agentExe(), agent.BridgeCommand}, conn, conn, io.Discard, false)
			return
		}
		select {
		case <-sp.done:
			continue // ended while it waited: the next
		default:
		}
		go func() {
			io.Copy(sp.in, conn)
			sp.in.Close()
		}()
		io.Copy(conn, sp.out)
		if sp.end != nil {
			sp.end()
		}
		return
	}
}

// listenOwner listens on a unix socket at path that only this user may
// connect to (created so, not chmod-ed after), replacing a stale one.
func listenOwner(path string) (net.Listener, error) {
	os.Remove(path)
	old := syscall.Umask(0o077)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	return l, err
}

// poolable reports whether a session's pod may come from a warm pool: its
// spec must not depend on the session (no Secret of files, no addresses
// resolved at start).
func (s *session) poolable() bool {
	r := &s.req
	if r.Session == nil || r.Session.Pool == "" || !r.NetworkNone {
		return false
	}
	for _, m := range r.Mounts {
		if m.File {
			return false
		}
	}
	return true
}

// template is the hash of what confines a pod: its containers (image,
// command, user, capabilities, mounts, limits) and volumes, the pod's
// security context, hostname and DNS. Names, labels and what the API
// server fills in are not part of it. A warm pod is claimed only when the
// hash of its live spec is the hash of the pod this session would make.
func template(p *corev1.Pod) string {
	type container struct {
		Name       string
		Image      string
		Command    []string
		WorkingDir string
		Env        []corev1.EnvVar
		Mounts     []corev1.VolumeMount
		Security   *corev1.SecurityContext
		Limits     corev1.ResourceList
	}
	var cs []container
	for _, c := range p.Spec.Containers {
		cs = append(cs, container{c.Name, c.Image, c.Command, c.WorkingDir, c.Env, c.VolumeMounts, c.SecurityContext, c.Resources.Limits})
	}
	sp := &p.Spec
	b, _ := json.Marshal(struct {
		Containers   []container
		Volumes      []corev1.Volume
		Security     *corev1.PodSecurityContext
		Token, Links *bool
		Hostname     string
		Aliases      []corev1.HostAlias
		DNS          *corev1.PodDNSConfig
		Restart      corev1.RestartPolicy
		Init         int
	}{cs, sp.Volumes, sp.SecurityContext, sp.AutomountServiceAccountToken, sp.EnableServiceLinks, sp.Hostname, sp.HostAliases,
		sp.DNSConfig, sp.RestartPolicy, len(sp.InitContainers)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:20]
}

// claim takes a ready pod of the session's template from its pool: a
// label patch with the pod's resourceVersion as its precondition, so that
// of two claims of one pod one fails (409) and tries the next. It returns
// the pod's name, or "" when none could be had (the session then starts a
// pod of its own).
func (s *session) claim(ctx context.Context, want *corev1.Pod) string {
	if !s.poolable() {
		return ""
	}
	r, c := &s.req, s.c
	key := template(want)
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{
		LabelSelector: kube.LabelPool + "=" + labelValue(r.Session.Pool) + "," + kube.LabelTemplate + "=" + key + "," + kube.LabelReady + "=1",
		FieldSelector: "status.phase=Running"})
	if err != nil || len(pods.Items) == 0 {
		return ""
	}
	// Claims of one template start at different pods.
	rand.Shuffle(len(pods.Items), func(i, j int) { pods.Items[i], pods.Items[j] = pods.Items[j], pods.Items[i] })
	host, _ := os.Hostname()
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || template(p) != key {
			continue // going, or not the pod this session would make
		}
		patch := map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion,
			"labels": map[string]any{kube.LabelOwner: r.Owner, kube.LabelHost: labelValue(host),
				kube.LabelPool: nil, kube.LabelReady: nil, "pinfold.session": r.ID}}}
		if r.TimeoutMS > 0 && p.Status.StartTime != nil {
			// The cluster's own end for it, as a cold pod's (a deadline
			// may only come closer).
			d := int64(time.Since(p.Status.StartTime.Time).Seconds()) + (r.TimeoutMS+999)/1000 + 300
			if p.Spec.ActiveDeadlineSeconds == nil || d < *p.Spec.ActiveDeadlineSeconds {
				patch["spec"] = map[string]any{"activeDeadlineSeconds": d}
			}
		}
		b, _ := json.Marshal(patch)
		if _, err := c.cs.CoreV1().Pods(c.ns).Patch(ctx, p.Name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
			return ""
		}
		s.pod, s.warm = p.Name, true
		grace := int64(1)
		s.made = append(s.made, func(ctx context.Context) {
			c.cs.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		})
		s.mark("pod claimed")
		return p.Name
	}
	return ""
}

// tellPool tells the pool keeper (if any) which template this session
// used, so that it keeps warm pods of it.
func (s *session) tellPool(want *corev1.Pod) {
	if !s.poolable() || s.req.Session.PoolSock == "" {
		return
	}
	t := s.req
	sess := *t.Session
	sess.Env, sess.Sock = nil, ""
	t.Session = &sess
	t.ID, t.Owner, t.Env, t.Args, t.Stdin, t.TTY, t.Rows, t.Cols, t.TimeoutMS, t.Upper = "", "", nil, nil, false, false, 0, 0, 0, ""
	conn, err := net.DialTimeout("unix", s.req.Session.PoolSock, time.Second)
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	json.NewEncoder(conn).Encode(&t)
}

// maxTemplates bounds the templates a keeper keeps pods of (the most
// recently used); a template no session asked for in templateTTL is
// dropped with its pods.
const (
	maxTemplates = 8
	templateTTL  = 10 * time.Minute
)

// keeper keeps size ready pods of every template it has been told of.
type keeper struct {
	c     *client
	name  string
	size  int
	owner string
	host  string

	mu        sync.Mutex
	templates map[string]*tmpl
	wake      chan struct{}
}

type tmpl struct {
	req  kube.Request
	used time.Time
	// filling counts the pods being made.
	filling int
}

// pool runs a keeper: pinfold-kube pool NAME SIZE SOCKET. It ends when its
// stdin ends (the server that started it is gone) or on SIGTERM, and
// deletes its pods then; pods it made carry its pid as their owner, so
// that pinfold clean removes them should it be killed.
func pool(args []string, term <-chan os.Signal) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pinfold-kube pool NAME SIZE SOCKET")
		return 2
	}
	var size int
	if _, err := fmt.Sscan(args[1], &size); err != nil || size < 1 || size > 64 {
		fmt.Fprintln(os.Stderr, "pinfold-kube pool: SIZE is 1 to 64")
		return 2
	}
	c, err := envConnect()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube:", err)
		return 1
	}
	host, _ := os.Hostname()
	k := &keeper{c: c, name: labelValue(args[0]), size: size, owner: ownerOf(os.Getpid()), host: host,
		templates: map[string]*tmpl{}, wake: make(chan struct{}, 1)}
	l, err := listenOwner(args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinfold-kube pool:", err)
		return 1
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	go func() {
		select {
		case <-term:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			var t kube.Request
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			err = json.NewDecoder(conn).Decode(&t)
			conn.Close()
			if err == nil && t.Session != nil {
				k.add(t)
			}
		}
	}()
	fmt.Fprintf(os.Stderr, "pinfold-kube pool %s: %d warm pods a template, in namespace %s\n", k.name, size, c.ns)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		k.fill(ctx)
		select {
		case <-ctx.Done():
		case <-k.wake:
		case <-tick.C:
		}
	}
	// Its pods go with it (claimed ones are no longer its own).
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	zero := int64(0)
	c.cs.CoreV1().Pods(c.ns).DeleteCollection(dctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + k.name + "," + kube.LabelOwner + "=" + k.owner})
	return 0
}

func ownerOf(pid int) string {
	return fmt.Sprintf("%d-%d", pid, procstat.StartTime(pid))
}

// add keeps t's template (the least recently used one goes beyond
// maxTemplates, its pods with it).
func (k *keeper) add(t kube.Request) {
	s := &session{req: t}
	s.req.ID = "template"
	pod, _, _, err := s.objects()
	if err != nil {
		return
	}
	key := template(pod)
	k.mu.Lock()
	if cur, ok := k.templates[key]; ok {
		cur.used = time.Now()
	} else {
		k.templates[key] = &tmpl{req: t, used: time.Now()}
		if len(k.templates) > maxTemplates {
			var oldest string
			for key, t := range k.templates {
				if oldest == "" || t.used.Before(k.templates[oldest].used) {
					oldest = key
				}
			}
			k.drop(oldest)
		}
	}
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// drop forgets a template and deletes its pods; k.mu is held.
func (k *keeper) drop(key string) {
	delete(k.templates, key)
	go k.c.cs.CoreV1().Pods(k.c.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + k.name + "," + kube.LabelTemplate + "=" + key + "," + kube.LabelOwner + "=" + k.owner})
}

// fill starts the pods each template lacks.
func (k *keeper) fill(ctx context.Context) {
	k.mu.Lock()
	for key, t := range k.templates {
		if time.Since(t.used) > templateTTL {
			k.drop(key)
		}
	}
	k.mu.Unlock()
	pods, err := k.c.cs.CoreV1().Pods(k.c.ns).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelPool + "=" + k.name + "," + kube.LabelOwner + "=" + k.owner})
	if err != nil {
		return
	}
	have := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			have[p.Labels[kube.LabelTemplate]]++
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, t := range k.templates {
		// Pods being made are listed once created; filling counts those
		// not created yet too.
		for n := have[key] + t.filling; n < k.size; n++ {
			t.filling++
			go func() {
				err := k.make(ctx, key, t.req)
				k.mu.Lock()
				t.filling--
				k.mu.Unlock()
				if err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "pinfold-kube pool %s: %v\n", k.name, err)
					time.Sleep(2 * time.Second) // not in a tight loop
				}
			}()
		}
	}
}

// make starts one warm pod of t: the same objects as a session's cold
// start, labelled for the pool; it is ready once it runs, its links are
// down and the agent is in.
func (k *keeper) make(ctx context.Context, key string, t kube.Request) error {
	s := &session{req: t, c: k.c, pooling: true}
	s.req.ID, s.req.Owner, s.req.Host = randomID(), k.owner, k.host
	pod, secret, pol, err := s.objects()
	if err != nil {
		return err
	}
	if secret != nil {
		return errors.New("a template with a secret cannot be pooled")
	}
	if got := template(pod); got != key {
		return fmt.Errorf("template %s made pod %s", key, got)
	}
	pod.Labels[kube.LabelPool], pod.Labels[kube.LabelTemplate] = k.name, key
	core := k.c.cs.CoreV1()
	created, err := core.Pods(k.c.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a warm pod: %w", err)
	}
	s.pod = created.Name
	zero := int64(0)
	ok := false
	defer func() {
		if !ok {
			core.Pods(k.c.ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}()
	if pol != nil {
		pol.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID}}
		if _, err := k.c.cs.NetworkingV1().NetworkPolicies(k.c.ns).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating a warm pod's network policy: %w", err)
		}
	}
	if err := s.waitRunning(ctx, created); err != nil {
		return err
	}
	if t.NetOff {
		if err := s.linksDown(ctx); err != nil {
			return err
		}
	}
	if dirs := s.copyDirs(); len(dirs) > 0 {
		if err := s.copyIn(ctx, dirs); err != nil {
			return err
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"1"}}}`, kube.LabelReady)
	if _, err := core.Pods(k.c.ns).Patch(ctx, created.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	ok = true
	return nil
}

func randomID() string {
	const hexd = "0123456789abcdef"
	var b strings.Builder
	for range 10 {
		b.WriteByte(hexd[rand.IntN(16)])
	}
	return b.String()
}
