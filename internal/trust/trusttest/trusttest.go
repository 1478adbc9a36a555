// Package trusttest serves images and their cosign signatures from a
// registry on loopback, for tests: images are made from tar layers, and
// signatures with keys the test generates, in cosign's format.
package trusttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Registry is a read-write test registry (only what skopeo's pulls and
// this package's pushes need).
type Registry struct {
	Addr string

	mu        sync.Mutex
	blobs     map[string][]byte            // digest -> bytes
	manifests map[string]map[string]string // repo -> tag or digest -> digest
	types     map[string]string            // manifest digest -> media type
}

// NewRegistry serves a registry on 127.0.0.1 until the test ends.
func NewRegistry(t testing.TB) *Registry {
	t.Helper()
	r := &Registry{blobs: map[string][]byte{}, manifests: map[string]map[string]string{}, types: map[string]string{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	r.Addr = l.Addr().String()
	return r
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	p := strings.TrimPrefix(req.URL.Path, "/v2/")
	if p == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := strings.LastIndex(p, "/manifests/"); i >= 0 {
		repo, ref := p[:i], p[i+len("/manifests/"):]
		d, ok := r.manifests[repo][ref]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
			return
		}
		w.Header().Set("Content-Type", r.types[d])
		w.Header().Set("Docker-Content-Digest", d)
		if req.Method != http.MethodHead {
			w.Write(r.blobs[d])
		}
		return
	}
	if i := strings.LastIndex(p, "/blobs/"); i >= 0 {
		b, ok := r.blobs[p[i+len("/blobs/"):]]
		if !ok {
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodHead {
			w.Write(b)
		}
		return
	}
	http.NotFound(w, req)
}

func (r *Registry) blob(b []byte) string {
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	r.blobs[d] = b
	return d
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// push stores a manifest of config and layers under repo:tag and returns
// its digest.
func (r *Registry) push(repo, tag string, config []byte, layers [][]byte, layerType string, annotations []map[string]string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.oci.image.manifest.v1+json",
		Config: descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: r.blob(config), Size: len(config)}}
	for i, l := range layers {
		d := descriptor{MediaType: layerType, Digest: r.blob(l), Size: len(l)}
		if annotations != nil {
			d.Annotations = annotations[i]
		}
		m.Layers = append(m.Layers, d)
	}
	b, _ := json.Marshal(m)
	d := r.blob(b)
	r.types[d] = m.MediaType
	if r.manifests[repo] == nil {
		r.manifests[repo] = map[string]string{}
	}
	r.manifests[repo][tag] = d
	r.manifests[repo][d] = d
	return d
}

// PushImage stores an image of one uncompressed tar layer as repo:tag
// and returns the manifest's digest.
func (r *Registry) PushImage(repo, tag string, layer []byte) string {
	diff := sha256.Sum256(layer)
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{}, "rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}}})
	return r.push(repo, tag, cfg, [][]byte{layer}, "application/vnd.oci.image.layer.v1.tar", nil)
}

// Key is a signing key and its public half in a file.
type Key struct {
	priv   *ecdsa.PrivateKey
	PubPEM string // path of the PEM public key
}

// NewKey makes an ECDSA P-256 key, as cosign generate-key-pair does, and
// writes its public key to dir/name.pub.
func NewKey(t testing.TB, dir, name string) *Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+".pub")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Key{priv: priv, PubPEM: p}
}

// Payload is cosign's simple-signing payload for repo@digest.
func Payload(repo, digest string) []byte {
	b, _ := json.Marshal(map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": repo},
			"image":    map[string]string{"docker-manifest-digest": digest},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	})
	return b
}

// Sign pushes a signature of payload made with k as the signature image
// of digest in repo (tag sha256-HEX.sig), as cosign sign does.
func (r *Registry) Sign(t testing.TB, repo, digest string, payload []byte, k *Key) {
	t.Helper()
	h := sha256.Sum256(payload)
	sig, err := k.priv.Sign(rand.Reader, h[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"architecture": "", "os": "", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(h[:])}}})
	r.push(repo, "sha256-"+strings.TrimPrefix(digest, "sha256:")+".sig", cfg, [][]byte{payload},
		"application/vnd.dev.cosign.simplesigning.v1+json",
		[]map[string]string{{"dev.cosignproject.cosign/signature": base64.StdEncoding.EncodeToString(sig)}})
}
