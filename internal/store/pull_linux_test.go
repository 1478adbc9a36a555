package store

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serveRegistry serves the OCI layout at dir as repository "test/img" of a
// registry on the loopback (the distribution protocol's read side).
func serveRegistry(t *testing.T, dir string) string {
	t.Helper()
	var idx struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	json.Unmarshal(b, &idx)
	tags := map[string]string{}
	for _, m := range idx.Manifests {
		tags[m.Annotations["org.opencontainers.image.ref.name"]] = m.Digest
	}
	blob := func(digest string) ([]byte, bool) {
		b, err := os.ReadFile(filepath.Join(dir, "blobs/sha256", strings.TrimPrefix(digest, "sha256:")))
		return b, err == nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		p := strings.TrimPrefix(r.URL.Path, "/v2/")
		switch {
		case p == "":
			w.WriteHeader(http.StatusOK)
		case strings.HasPrefix(p, "test/img/manifests/"):
			ref := strings.TrimPrefix(p, "test/img/manifests/")
			if d, ok := tags[ref]; ok {
				ref = d
			}
			b, ok := blob(ref)
			if !ok {
				http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", ref)
			w.Write(b)
		case strings.HasPrefix(p, "test/img/blobs/"):
			b, ok := blob(strings.TrimPrefix(p, "test/img/blobs/"))
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

func TestPullBase(t *testing.T) {
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Skip("pulling needs skopeo (scripts/test-setup.sh installs it)")
	}
	layout := t.TempDir()
	id := writeLayout(t, layout, makeTar(t, dir("etc", 0o755), file("etc/os-release", 0o644, "ID=pulled\n")))
	addr := serveRegistry(t, layout)
	ref := addr + "/test/img:v1"
	if !IsReference(ref) || IsReference("./dir/img") || IsReference("img.tar") {
		t.Fatal("IsReference")
	}
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	b, err := s.PullBase(ctx, ref, ImportOptions{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if b.Digest != id {
		t.Errorf("id %s, want the config digest %s", b.Digest, id)
	}
	if got, _ := os.ReadFile(b.Root + "/etc/os-release"); string(got) != "ID=pulled\n" {
		t.Errorf("os-release %q", got)
	}
	blobs, _ := os.ReadDir(s.dir + "/oci/blobs/sha256")
	if len(blobs) != 3 {
		t.Errorf("%d blobs in the store's layout, want 3", len(blobs))
	}
	// Pulled once: the registry is not asked again.
	n := s.imports.Load()
	if again, err := s.PullBase(ctx, ref, ImportOptions{}, false); err != nil || again != b || s.imports.Load() != n {
		t.Errorf("second pull: %+v %v", again, err)
	}
	// A refresh asks the registry again and finds the same image.
	if again, err := s.PullBase(ctx, ref, ImportOptions{}, true); err != nil || again.Digest != b.Digest {
		t.Errorf("refresh: %+v %v", again, err)
	}
	if _, err := s.PullBase(ctx, addr+"/test/img:missing", ImportOptions{}, false); !errors.Is(err, ErrPull) {
		t.Errorf("a missing tag: %v", err)
	}
}
