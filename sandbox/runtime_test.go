package sandbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pinfold/pinfold/sandbox"
)

func TestSupports(t *testing.T) {
	f := sandbox.Features{
		Isolated:       true,
		Bases:          []sandbox.BaseKind{sandbox.BaseHost},
		Access:         []sandbox.Access{sandbox.AccessReadWrite},
		Networks:       []sandbox.Network{sandbox.NetworkNone},
		Memory:         true,
		Mounts:         true,
		WritableMounts: true,
	}
	ok := []sandbox.Spec{
		{},
		{Network: sandbox.NetworkNone, Access: sandbox.AccessReadWrite, Limits: sandbox.Limits{Memory: 1 << 20}},
		{Mounts: []sandbox.Mount{{Source: "/a", Target: "/b"}}, Hostname: sandbox.DefaultHostname},
	}
	for _, s := range ok {
		if err := f.Supports("test", &s, nil); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	refused := map[string]sandbox.Spec{
		"base":             {Base: sandbox.Base{Kind: sandbox.BaseDebian12}},
		"workspace access": {Access: sandbox.AccessChangeset},
		"network":          {Network: sandbox.NetworkAllow},
		"published ports":  {Net: sandbox.NetPolicy{Publish: []string{"8080:80"}}},
		"pids limit":       {Limits: sandbox.Limits{Pids: 10}},
		"cpu limit":        {Limits: sandbox.Limits{CPUs: 1}},
		"captures":         {Captures: []sandbox.Capture{{Path: "/x"}}},
		"capabilities":     {Capabilities: []string{"NET_RAW"}},
		"root user":        {Root: true},
		"hostname":         {Hostname: "other"},
		"scratch /tmp":     {Scratch: "/s"},
		"host loopback":    {Net: sandbox.NetPolicy{HostLoopback: true}},
	}
	for feature, s := range refused {
		err := f.Supports("test", &s, nil)
		var ue *sandbox.UnsupportedError
		if !errors.As(err, &ue) || ue.Feature != feature || ue.Runtime != "test" {
			t.Errorf("%s: got %v", feature, err)
		}
	}
	// What a remote runtime lacks: image files, read-write mounts.
	f.Bases = append(f.Bases, sandbox.BaseOCI)
	f.WritableMounts = false
	for feature, s := range map[string]sandbox.Spec{
		"base":             {Base: sandbox.Base{Kind: sandbox.BaseOCI, Path: "/img.tar"}},
		"read-write mount": {Mounts: []sandbox.Mount{{Source: "/a", Target: "/b"}}},
	} {
		var ue *sandbox.UnsupportedError
		if err := f.Supports("test", &s, nil); !errors.As(err, &ue) || ue.Feature != feature {
			t.Errorf("%s: got %v", feature, err)
		}
	}
	if err := f.Supports("test", &sandbox.Spec{Base: sandbox.Base{Kind: sandbox.BaseOCI, Ref: "img:1"},
		Mounts: []sandbox.Mount{{Source: "/a", Target: "/b", ReadOnly: true}}}, nil); err != nil {
		t.Errorf("an image reference with a read-only mount: %v", err)
	}
	for feature, c := range map[string]*sandbox.Cmd{"terminal": {TTY: true}, "timeout": {Timeout: time.Second}} {
		var ue *sandbox.UnsupportedError
		if err := f.Supports("test", &sandbox.Spec{}, c); !errors.As(err, &ue) || ue.Feature != feature {
			t.Errorf("%s: got %v", feature, err)
		}
	}
}
