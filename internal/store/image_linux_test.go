package store

import (
	"context"
	"errors"
	"os"
	"testing"
)

func TestSandboxID(t *testing.T) {
	a := SandboxID("sha256:aa", []string{"xml", "postgres"}, []string{"profile=install"})
	if a != SandboxID("sha256:aa", []string{"postgres", "xml", "xml"}, []string{"profile=install"}) {
		t.Error("capability order or repeats changed the id")
	}
	for _, other := range []string{
		SandboxID("sha256:ab", []string{"xml", "postgres"}, []string{"profile=install"}),
		SandboxID("sha256:aa", []string{"xml"}, []string{"profile=install"}),
		SandboxID("sha256:aa", []string{"xml", "postgres"}, []string{"profile=test"}),
		SandboxID("sha256:aa", []string{"xml,postgres"}, []string{"profile=install"}),
	} {
		if other == a {
			t.Errorf("a different input gave the same id %s", a)
		}
	}
	// Pinned: the encoding must not change without IDFormat changing.
	if got := SandboxID("sha256:00", nil, nil); got != "sha256:a370607b34d29021241c96db83ec00891bd0ccf2e7ac78a968595345b87cd1c6" {
		t.Errorf("SandboxID of the empty inputs is %s: the encoding changed; raise IDFormat", got)
	}
}

// fakeImage writes an image manifest for base by hand.
func fakeImage(t *testing.T, s *Store, id, base string, format int) string {
	t.Helper()
	dir := s.dir + "/images/" + id[len("sha256:"):]
	if err := os.MkdirAll(dir+"/rootfs", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(dir+"/manifest.json", &ImageInfo{ID: id, Base: base, Capabilities: []string{"xml"}, Format: format}, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImageLookupAndGC(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	var bases []Base
	for _, body := range []string{"kept", "unused"} {
		b, err := s.TarBase(ctx, writeArchive(t, t.TempDir(), makeTar(t, file("f", 0o644, body))), ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, b)
	}
	good := SandboxID(bases[0].Digest, []string{"xml"}, nil)
	fakeImage(t, s, good, bases[0].Digest, manifestFormat)
	orphan := SandboxID("sha256:gone", []string{"xml"}, nil)
	orphanDir := fakeImage(t, s, orphan, "sha256:0000", manifestFormat)
	old := SandboxID(bases[0].Digest, []string{"ssl"}, nil)
	fakeImage(t, s, old, bases[0].Digest, manifestFormat+1)

	if m, err := s.Image(good); err != nil || m.Base != bases[0].Digest || m.Root == "" {
		t.Fatalf("Image = %+v, %v", m, err)
	}
	// An image already there (say, built while this build waited for the
	// lock) is used as it is.
	got, err := s.BuildImage(ctx, ImageInfo{ID: good}, bases[0], func(context.Context, string) error {
		t.Error("BuildImage installed packages for an image in place")
		return nil
	})
	if err != nil || got.ID != good {
		t.Errorf("BuildImage of an existing image: %+v %v", got, err)
	}
	if _, err := s.Image(old); !errors.Is(err, ErrFormat) {
		t.Errorf("an image of another format: %v", err)
	}
	dry, err := s.GC(true)
	if err != nil || len(dry) != 3 {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if _, err := os.Stat(orphanDir); err != nil {
		t.Fatal("a dry run removed something")
	}
	// A base in use stays.
	release := UseBase(bases[1].Root)
	removed, err := s.GC(false)
	if err != nil || len(removed) != 2 {
		t.Fatalf("gc with the unused base in use: %v %v", removed, err)
	}
	release()
	if removed, _ = s.GC(false); len(removed) != 1 {
		t.Fatalf("gc after: %v", removed)
	}
	if _, err := s.Image(good); err != nil {
		t.Errorf("gc removed a referenced image: %v", err)
	}
	if list, _ := s.Bases(); len(list) != 1 || list[0].ID != bases[0].Digest {
		t.Errorf("bases left: %+v", list)
	}
}
