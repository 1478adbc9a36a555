package landlock

import "testing"

func TestHandled(t *testing.T) {
	for _, c := range []struct {
		abi     int
		fs, net uint64
	}{
		{0, 0, 0},
		{1, 0x1fff, 0},
		{2, 0x3fff, 0},
		{3, 0x7fff, 0},
		{4, 0x7fff, 3},
		{5, 0xffff, 3},
		{7, 0xffff, 3},
	} {
		if fs, net := HandledFS(c.abi), HandledNet(c.abi); fs != c.fs || net != c.net {
			t.Errorf("ABI %d: handled %#x %#x, want %#x %#x", c.abi, fs, net, c.fs, c.net)
		}
	}
	if Read&Write != 0 || (Read|Write) != HandledFS(7) {
		t.Errorf("Read %#x and Write %#x must split the rights %#x", Read, Write, HandledFS(7))
	}
}

func TestSwitch(t *testing.T) {
	t.Setenv(Env, "0")
	if Active() != 0 {
		t.Fatal("PINFOLD_LANDLOCK=0 leaves Landlock active")
	}
	t.Setenv(Env, "")
	if ABI() >= MinABI && Active() != ABI() || ABI() < MinABI && Active() != 0 {
		t.Fatal("Active differs from ABI without the switch")
	}
}

func TestStatus(t *testing.T) {
	t.Setenv(Env, "0")
	if got := Status(); got != "no landlock (PINFOLD_LANDLOCK=0)" {
		t.Errorf("Status with the switch off: %q", got)
	}
	t.Setenv(Env, "")
	want := "no landlock (the kernel has none)"
	if ABI() >= MinABI {
		want = "landlock (ABI " + string(rune('0'+ABI())) + ")"
	}
	if l := Layers(); l[0] != "namespaces" || l[1] != "seccomp" || ABI() != 1 && l[2] != want {
		t.Errorf("Layers: %q, want namespaces, seccomp, %q", l, want)
	}
}
