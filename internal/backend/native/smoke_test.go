package native

import (
	"os"
	"syscall"
	"testing"
)

func TestSmoke(t *testing.T) {
	const rdonly, nosuid, nodev = 1, 2, 4
	ops := []Op{
		{Kind: OpMkdir, B: "/usr", Mode: 0755},
		{Kind: OpBind, Flags: OpHostSource, A: "/usr", B: "/usr", MountFlags: syscall.MS_REC, Attr: rdonly | nosuid | nodev},
		{Kind: OpMkdir, B: "/etc", Mode: 0755},
		{Kind: OpBind, Flags: OpHostSource, A: "/etc", B: "/etc", MountFlags: syscall.MS_REC, Attr: rdonly | nosuid | nodev},
		{Kind: OpSymlink, A: "usr/bin", B: "/bin"},
		{Kind: OpSymlink, A: "usr/lib", B: "/lib"},
		{Kind: OpSymlink, A: "usr/lib64", B: "/lib64"},
		{Kind: OpMkdir, B: "/proc", Mode: 0555},
		{Kind: OpMount, A: "proc", B: "/proc", C: "proc", MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC},
		{Kind: OpMkdir, B: "/dev", Mode: 0755},
		{Kind: OpMount, A: "tmpfs", B: "/dev", C: "tmpfs", D: "mode=0755", MountFlags: syscall.MS_NOSUID},
		{Kind: OpMkfile, B: "/dev/null", Mode: 0666},
		{Kind: OpBind, Flags: OpHostSource, A: "/dev/null", B: "/dev/null"},
		{Kind: OpMkdir, B: "/tmp", Mode: 01777},
		{Kind: OpMount, A: "tmpfs", B: "/tmp", C: "tmpfs", D: "mode=1777,size=16m", MountFlags: syscall.MS_NOSUID | syscall.MS_NODEV},
	}
	c := &Config{
		SpawnConfig: SpawnConfig{
			Namespaces: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
			UIDMap:     "0 1879048192 65536\n", GIDMap: "0 1879048192 65536\n", InitID: &ID{0, 0},
		},
		User: &ID{0, 0},
		Ops:  ops, Hostname: "sandbox", Scratch: "/tmp", LoopbackUp: true, RootReadOnly: true, CapLast: 40, NoNewPrivs: true,
	}
	in, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	_, err = in.Exec(&Exec{Args: []string{"sh", "-c", "echo hello from $(hostname) uid=$(id -u) pid=$$; ls /; cat /proc/self/status | grep -E 'Cap|NoNew'; ls -la /proc/1/exe; exit 3"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Setsid: true, Stdio: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := in.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status %+v exit=%d", st, st.Wait.ExitStatus())
	if st.Wait.ExitStatus() != 3 {
		t.Fatal("wrong status")
	}
	_ = os.Stdout
}
