package kubehelper

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
)

func sessionRequest() kube.Request {
	r := baseRequest()
	r.Env = nil
	r.Args = []string{"/.pinfold/agent", "__session-agent", "0"}
	r.Session = &kube.Session{Agent: "/usr/local/bin/pinfold", Env: []string{"TOKEN=s3cr3t"}, Sock: "/s/run/agent.sock", Pool: "p"}
	return r
}

// TestSessionPod checks a session's pod: the agent's volumes, its
// environment nowhere in the pod or a Secret, the same confinement as a
// run's.
func TestSessionPod(t *testing.T) {
	s := &session{req: sessionRequest()}
	pod, secret, pol, err := s.objects()
	if err != nil {
		t.Fatal(err)
	}
	if secret != nil {
		t.Errorf("a session's pod has a secret: %v", secret.Data)
	}
	if pol == nil {
		t.Error("no deny-all policy for network none")
	}
	mounts := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		if len(c.Env) > 0 {
			t.Errorf("container %s has an environment: %v", c.Name, c.Env)
		}
		if c.Name == mainName {
			for _, m := range c.VolumeMounts {
				mounts[m.MountPath] = m.ReadOnly
			}
		}
	}
	if ro, ok := mounts[kube.AgentDir]; !ok || !ro {
		t.Errorf("the agent is not mounted read-only: %v", mounts)
	}
	for _, p := range []string{kube.SessionRun, kube.SessionHome, "/ws"} {
		if ro, ok := mounts[p]; !ok || ro {
			t.Errorf("%s is not mounted writable: %v", p, mounts)
		}
	}
	dirs := s.copyDirs()
	if len(dirs) != 2 || dirs[0].FileName != agentFile || dirs[1].Src != "/ws" {
		t.Errorf("copied in: %+v", dirs)
	}
	if dirs[0].Done != agentDone || s.agentIn() {
		t.Errorf("a cold pod's agent: marker %q, in from the start %v", dirs[0].Done, s.agentIn())
	}
	s.warm = true
	if dirs := s.copyDirs(); len(dirs) != 1 || dirs[0].Src != "/ws" {
		t.Errorf("copied into a warm pod: %+v", dirs)
	}
}

// TestSessionAgentImage checks a session's pod with an agent image: the
// agent's volume is the image (no copy of it), and the agent is run from
// it; and that the image is part of the pod's template.
func TestSessionAgentImage(t *testing.T) {
	plain := &session{req: sessionRequest()}
	plainPod, _, _, err := plain.objects()
	if err != nil {
		t.Fatal(err)
	}
	s := &session{req: sessionRequest()}
	s.req.Session.AgentImage = "registry.example/pinfold-agent:1"
	pod, _, _, err := s.objects()
	if err != nil {
		t.Fatal(err)
	}
	var img string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "agent" && v.Image != nil {
			img = v.Image.Reference
		}
	}
	if img != s.req.Session.AgentImage {
		t.Errorf("the agent's volume is not the image: %+v", pod.Spec.Volumes)
	}
	for _, d := range s.copyDirs() {
		if d.Name == "agent" {
			t.Errorf("the agent is copied in too: %+v", d)
		}
	}
	if !s.agentIn() || s.agentExe() != kube.AgentDir+"/pinfold-agent" {
		t.Errorf("agent in %v at %s", s.agentIn(), s.agentExe())
	}
	if template(pod) == template(plainPod) {
		t.Error("a pod with the agent image has the template of one without")
	}
}

// TestTemplate checks that a pod's template depends on what confines it,
// not on the run's names, and which sessions may come from a pool.
func TestTemplate(t *testing.T) {
	key := func(r kube.Request) string {
		t.Helper()
		pod, _, _, err := (&session{req: r}).objects()
		if err != nil {
			t.Fatal(err)
		}
		return template(pod)
	}
	a := sessionRequest()
	b := sessionRequest()
	b.ID, b.Owner, b.Session.Env = "other", "9-9", []string{"TOKEN=other"}
	if key(a) != key(b) {
		t.Error("two sessions of one plan have different templates")
	}
	for name, change := range map[string]func(*kube.Request){
		"image":     func(r *kube.Request) { r.Image = "img:2" },
		"user":      func(r *kube.Request) { r.UID = 1001 },
		"memory":    func(r *kube.Request) { r.Memory = 1 << 30 },
		"workspace": func(r *kube.Request) { r.Workspace, r.Dir = "/other", "/other" },
		"access":    func(r *kube.Request) { r.Access = "ro" },
		"hostname":  func(r *kube.Request) { r.Hostname = "h2" },
		"mount":     func(r *kube.Request) { r.Mounts = []kube.Mount{{Source: "/x", Target: "/x", ReadOnly: true}} },
	} {
		c := sessionRequest()
		change(&c)
		if key(c) == key(a) {
			t.Errorf("%s: the same template", name)
		}
	}
	// A tenant's workspaces, mounted at their parent: one template.
	t1, t2 := sessionRequest(), sessionRequest()
	t1.Workspace, t1.Dir, t1.WorkspaceParent = "/store/tenants/a/ws-1", "/store/tenants/a/ws-1", true
	t2.Workspace, t2.Dir, t2.WorkspaceParent = "/store/tenants/a/ws-2", "/store/tenants/a/ws-2", true
	if key(t1) != key(t2) {
		t.Error("two workspaces of one parent have different templates")
	}
	if dirs := (&session{req: t1}).copyDirs(); len(dirs) != 2 || dirs[1].Name != "ws/ws-1" || !dirs[1].Root {
		t.Errorf("a tenant's workspace copied as %+v", dirs)
	}
	for name, c := range map[string]struct {
		change func(*kube.Request)
		want   bool
	}{
		"session":       {func(*kube.Request) {}, true},
		"no pool":       {func(r *kube.Request) { r.Session.Pool = "" }, false},
		"network allow": {func(r *kube.Request) { r.NetworkNone, r.NetworkAllow = false, true }, false},
		"secret file": {func(r *kube.Request) {
			r.Mounts = []kube.Mount{{Source: "/f", Target: "/f", ReadOnly: true, File: true}}
		}, false},
		"a run": {func(r *kube.Request) { r.Session = nil }, false},
	} {
		r := sessionRequest()
		c.change(&r)
		if got := (&session{req: r}).poolable(); got != c.want {
			t.Errorf("%s: poolable %v", name, got)
		}
	}
}

// TestWarmAgent: a session's pod runs the agent in main, which waits for
// the session's attach (stdin, once), the same for a pool's keeper,
// whose template has no arguments, and for the claimer; not with
// PINFOLD_KUBE_ATTACH=off, for a tenant's workspace, an agent image, or
// a session whose agent has other arguments (their pod holds main's
// sleep, so that no pool pod of the other kind matches).
func TestWarmAgent(t *testing.T) {
	main := func(r kube.Request) (*corev1.Container, *session) {
		t.Helper()
		s := &session{req: r}
		pod, _, _, err := s.objects()
		if err != nil {
			t.Fatal(err)
		}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == mainName {
				return &pod.Spec.Containers[i], s
			}
		}
		t.Fatal("no main")
		return nil, nil
	}
	claimer := sessionRequest()
	c, s := main(claimer)
	if !s.mainAgent || !c.Stdin || !c.StdinOnce || !slices.Equal(c.Command, agentMain(false)) {
		t.Errorf("a pool's pod's main: agent %v, stdin %v/%v, %q", s.mainAgent, c.Stdin, c.StdinOnce, c.Command)
	}
	if !slices.Contains(c.Command, agent.EnvAttach) || !slices.Contains(c.Command, agent.AgentCommand) {
		t.Errorf("main does not run the agent for an attach: %q", c.Command)
	}
	noPool := sessionRequest()
	noPool.Session.Pool = ""
	if c, s := main(noPool); !s.mainAgent || !slices.Equal(c.Command, agentMain(false)) {
		t.Errorf("a session without a pool: main %q", c.Command)
	}
	keeper := sessionRequest()
	keeper.Args = nil
	if kc, _ := main(keeper); !slices.Equal(kc.Command, c.Command) {
		t.Errorf("the keeper's main %q, the claimer's %q", kc.Command, c.Command)
	}
	for name, change := range map[string]func(*kube.Request){
		"other arguments": func(r *kube.Request) { r.Args = []string{"/.pinfold/agent", "__session-agent", "5m"} },
		"agent image":     func(r *kube.Request) { r.Session.AgentImage = "img" },
		"tenant": func(r *kube.Request) {
			r.Workspace, r.Dir, r.WorkspaceParent = "/store/tenants/a/ws-1", "/store/tenants/a/ws-1", true
		},
		"a run": func(r *kube.Request) { r.Session = nil },
	} {
		r := sessionRequest()
		change(&r)
		if c, s := main(r); s.mainAgent || c.Stdin || slices.Contains(c.Command, agent.EnvAttach) {
			t.Errorf("%s: main runs the agent: %q", name, c.Command)
		}
	}
	t.Setenv("PINFOLD_KUBE_ATTACH", "off")
	if c, s := main(sessionRequest()); s.mainAgent || c.Stdin {
		t.Errorf("PINFOLD_KUBE_ATTACH=off: main runs the agent: %q", c.Command)
	}
}
