package oci

import (
	"archive/tar"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// otherArch is an architecture that is not this machine's.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

func TestRefs(t *testing.T) {
	l := newLayout(t, filepath.Join(t.TempDir(), "layout"))
	a := l.image("", map[string]any{"Env": []string{"IMAGE=a"}}, plainLayer(makeTar(t, file("a", 0o644, "a"))))
	b := l.image("", map[string]any{"Env": []string{"IMAGE=b"}}, plainLayer(makeTar(t, file("b", 0o644, "b"))))
	c := l.image("", map[string]any{"Env": []string{"IMAGE=c"}})
	c.Annotations = map[string]string{annotContainerdName: "docker.io/library/busybox:1.36"}
	l.index(named(a, "v1"), named(b, "example.org/tools:v2"), c)

	for ref, want := range map[string]string{
		"v1":                             "IMAGE=a",
		"example.org/tools:v2":           "IMAGE=b",
		b.Digest:                         "IMAGE=b",
		"busybox:1.36":                   "IMAGE=c",
		"docker.io/library/busybox:1.36": "IMAGE=c",
	} {
		img, err := Open(context.Background(), l.dir, ref)
		if err != nil {
			t.Errorf("Open(%q): %v", ref, err)
			continue
		}
		if len(img.Config.Env) != 1 || img.Config.Env[0] != want {
			t.Errorf("Open(%q) picked %v; want %s", ref, img.Config.Env, want)
		}
	}
	for ref, msg := range map[string]string{
		"":       "the index lists 3 images; choose one: v1, example.org/tools:v2, docker.io/library/busybox:1.36",
		"v3":     `no image named "v3"; the index lists: v1`,
		"tools":  `no image named "tools"`,
		"sha256": `no image named`,
	} {
		if _, err := Open(context.Background(), l.dir, ref); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Open(%q): %v; want %q", ref, err, msg)
		}
	}
}

func TestPlatforms(t *testing.T) {
	l := newLayout(t, filepath.Join(t.TempDir(), "layout"))
	ours := l.image("", map[string]any{"Env": []string{"ARCH=ours"}})
	theirs := l.image(otherArch(), map[string]any{"Env": []string{"ARCH=theirs"}})
	attest := l.json(map[string]any{"schemaVersion": 2, "mediaType": mtOCIManifest}, mtOCIManifest)
	attest.Platform = &platform{OS: "unknown", Architecture: "unknown"}
	multi := l.json(map[string]any{"schemaVersion": 2, "mediaType": mtOCIIndex, "manifests": []descriptor{
		onPlatform(theirs, otherArch()), onPlatform(ours, runtime.GOARCH), attest,
	}}, mtOCIIndex)
	foreign := l.json(map[string]any{"schemaVersion": 2, "mediaType": mtOCIIndex, "manifests": []descriptor{
		onPlatform(theirs, otherArch()), attest,
	}}, mtOCIIndex)
	l.index(named(multi, "multi"), named(foreign, "foreign"), named(theirs, "theirs"))

	img, err := Open(context.Background(), l.dir, "multi")
	if err != nil {
		t.Fatal(err)
	}
	if img.ManifestDigest != ours.Digest || img.Config.Env[0] != "ARCH=ours" {
		t.Errorf("picked %s %v; want %s", img.ManifestDigest, img.Config.Env, ours.Digest)
	}
	if _, err := Open(context.Background(), l.dir, "foreign"); err == nil || !strings.Contains(err.Error(), "no image for linux/"+runtime.GOARCH+"; it has linux/"+otherArch()+", unknown/unknown") {
		t.Errorf("Open(foreign): %v", err)
	}
	if _, err := Open(context.Background(), l.dir, "theirs"); err == nil || !strings.Contains(err.Error(), "the image is for linux/"+otherArch()) {
		t.Errorf("Open(theirs): %v", err)
	}

	// One name listed once per platform, as some tools write index.json.
	l2 := newLayout(t, filepath.Join(t.TempDir(), "layout"))
	ours = l2.image("", nil)
	theirs = l2.image(otherArch(), nil)
	l2.index(named(onPlatform(theirs, otherArch()), "v1"), named(onPlatform(ours, runtime.GOARCH), "v1"))
	if img, err := Open(context.Background(), l2.dir, "v1"); err != nil || img.ManifestDigest != ours.Digest {
		t.Errorf("Open: %v; want %s", err, ours.Digest)
	}
}

// dockerArchive writes a docker-archive by hand, as old docker save did:
// layers in <id>/layer.tar, a repeated layer as a symlink to the first.
func dockerArchive(t *testing.T, images ...[]string) string {
	t.Helper()
	var ents []ent
	var manifest []dockerImage
	shared := makeTar(t, file("shared", 0o644, "shared body"))
	ents = append(ents, dir("aaaa/", 0o755), file("aaaa/layer.tar", 0o644, string(shared)))
	for i, tags := range images {
		own := makeTar(t, file("own", 0o644, strings.Join(tags, ",")))
		id := strings.Repeat(string(rune('b'+i)), 4)
		ents = append(ents, dir(id+"/", 0o755), file(id+"/layer.tar", 0o644, string(own)),
			dir(id+"-shared/", 0o755), symlink(id+"-shared/layer.tar", "../aaaa/layer.tar"))
		cfg, _ := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH, "os": "linux",
			"config": map[string]any{"Cmd": []string{"/bin/sh"}, "Env": tags},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digestOf(shared), digestOf(own)}},
		})
		name := strings.TrimPrefix(digestOf(cfg), "sha256:") + ".json"
		ents = append(ents, file(name, 0o644, string(cfg)))
		manifest = append(manifest, dockerImage{Config: name, RepoTags: tags, Layers: []string{id + "-shared/layer.tar", "./" + id + "/layer.tar"}})
	}
	m, _ := json.Marshal(manifest)
	ents = append(ents, file("manifest.json", 0o644, string(m)))
	p := filepath.Join(t.TempDir(), "image.tar")
	writeFile(t, p, makeTar(t, ents...))
	return p
}

func TestDockerArchive(t *testing.T) {
	checkFDs(t)
	p := dockerArchive(t, []string{"docker.io/library/one:latest"}, []string{"localhost/two:1", "two:other"}, nil)
	for ref, want := range map[string]string{"one": "one", "one:latest": "one", "two:1": "two", "localhost/two:other": "two"} {
		root, img, st, err := applyTo(t, p, ref, ApplyOptions{})
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if img.Format != "docker-archive" || img.ManifestDigest != img.ConfigDigest || len(img.Layers) != 2 || st.Layers != 2 {
			t.Errorf("%s: image %+v", ref, img)
		}
		for _, l := range img.Layers {
			if l.Digest != l.DiffID || l.MediaType != mtLayerTar {
				t.Errorf("%s: layer %+v", ref, l)
			}
		}
		b, err := os.ReadFile(filepath.Join(root, "own"))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: own = %q, %v", ref, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(root, "shared")); err != nil || string(b) != "shared body" {
			t.Errorf("%s: shared = %q, %v", ref, b, err)
		}
	}
	// The untagged image is chosen by its id.
	img, err := Open(context.Background(), p, "")
	if err == nil || !strings.Contains(err.Error(), "holds 3 images; choose one: docker.io/library/one:latest, localhost/two:1 two:other, sha256:") {
		t.Fatalf("Open: %v, %v", img, err)
	}
	id := err.Error()[strings.LastIndex(err.Error(), "sha256:"):]
	if img, err = Open(context.Background(), p, id); err != nil || img.ConfigDigest != id {
		t.Errorf("Open(%s): %v", id, err)
	}
	if _, err := Open(context.Background(), p, "three"); err == nil || !strings.Contains(err.Error(), `no image named "three"`) {
		t.Errorf("Open(three): %v", err)
	}
}

func TestDockerArchiveDamaged(t *testing.T) {
	p := dockerArchive(t, []string{"one:latest"})
	b, _ := os.ReadFile(p)
	// Change the shared layer's content, same size: its diff id no longer
	// matches.
	fixed := strings.Replace(string(b), "shared body", "shared BODY", 1)
	if fixed == string(b) {
		t.Fatal("no layer content to damage")
	}
	writeFile(t, p, []byte(fixed))
	_, _, _, err := applyTo(t, p, "", ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("Apply: %v; want a digest mismatch", err)
	}

	// A manifest naming a layer the archive does not have.
	var ents []ent
	cfg := `{"os":"linux","rootfs":{"type":"layers","diff_ids":["` + digestOf(nil) + `"]}}`
	ents = append(ents, file("c.json", 0o644, cfg), file("manifest.json", 0o644, `[{"Config":"c.json","Layers":["nope/layer.tar"]}]`))
	p2 := filepath.Join(t.TempDir(), "missing.tar")
	writeFile(t, p2, makeTar(t, ents...))
	if _, err := Open(context.Background(), p2, ""); err == nil || !strings.Contains(err.Error(), "nope/layer.tar") {
		t.Errorf("Open with a missing layer: %v", err)
	}
}

func TestNotAnImage(t *testing.T) {
	dir := t.TempDir()
	tarball := filepath.Join(dir, "plain.tar")
	writeFile(t, tarball, makeTar(t, file("etc/hostname", 0o644, "box")))
	gz := filepath.Join(dir, "image.tar.gz")
	writeFile(t, gz, gzipBytes(t, makeTar(t, file("manifest.json", 0o644, "[]"))))
	loop := filepath.Join(dir, "loop.tar")
	writeFile(t, loop, makeTar(t, symlink("a", "b"), symlink("b", "a"),
		file("c.json", 0o644, `{"os":"linux","rootfs":{"type":"layers","diff_ids":["`+digestOf(nil)+`"]}}`),
		file("manifest.json", 0o644, `[{"Config":"c.json","Layers":["a"]}]`)))
	for p, msg := range map[string]string{
		t.TempDir():                "no oci-layout file",
		tarball:                    "not an image archive",
		gz:                         "gzip-compressed; decompress it first",
		loop:                       "too many links",
		filepath.Join(dir, "none"): "no such file",
		"/dev/null":                "not a directory or a regular file",
	} {
		if _, err := Open(context.Background(), p, ""); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Open(%s): %v; want %q", p, err, msg)
		}
	}
}

// TestArchiveIndex checks that archive entries are read at the right
// offsets whatever the headers before them: long names (PAX or GNU
// records) and empty files.
func TestArchiveIndex(t *testing.T) {
	long := strings.Repeat("d", 150) + "/" + strings.Repeat("f", 120)
	var ents []ent
	ents = append(ents, file("empty", 0o644, ""), file(long, 0o644, "long body"))
	e := file("pax", 0o644, "pax body")
	e.Hdr.PAXRecords = map[string]string{"comment": strings.Repeat("x", 2000)}
	ents = append(ents, e)
	g := file(strings.Repeat("g", 120), 0o644, "gnu body")
	g.Hdr.Format = tar.FormatGNU
	ents = append(ents, g)
	p := filepath.Join(t.TempDir(), "a.tar")
	writeFile(t, p, makeTar(t, ents...))
	src, err := indexArchive(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"empty": "", long: "long body", "pax": "pax body", strings.Repeat("g", 120): "gnu body"} {
		b, err := readFile(src, name, 1<<20)
		if err != nil || string(b) != want {
			t.Errorf("%.20s = %q, %v; want %q", name, b, err, want)
		}
	}
}
