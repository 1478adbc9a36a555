package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Pulled images share one OCI layout in the store, so their blobs are
// content-addressed and stored once:
//
//	oci/blobs/sha256/<hex>   layers, configs and manifests of every pulled image
//	oci/index.json           one entry per pulled reference (ref.name: the key below)
//
// Pulling is done by skopeo, which speaks the registry protocol (tokens,
// mirrors, credentials) as the rest of the machine's container tools do.

// ErrPull: an image could not be pulled from its registry.
var ErrPull = errors.New("pulling the image failed")

// PullBase pulls ref from its registry into the store's shared layout and
// returns its root filesystem, unpacked as OCIBase does. An image pulled
// before is used without asking the registry again, unless refresh is set
// (pinfold base pull), which asks it what the tag names now.
func (s *Store) PullBase(ctx context.Context, ref string, opt ImportOptions, refresh bool) (Base, error) {
	ref = strings.TrimPrefix(ref, "docker://")
	key := pullKey(ref)
	layout := s.dir + "/oci"
	if !refresh {
		if b, err := s.OCIBase(ctx, layout, key, opt); err == nil {
			return b, nil
		}
	}
	tool, err := exec.LookPath("skopeo")
	if err != nil {
		return Base{}, fmt.Errorf("%w: %s: pulling from a registry needs skopeo (apt-get install skopeo)", ErrPull, ref)
	}
	if err := os.MkdirAll(layout, 0o700); err != nil {
		return Base{}, err
	}
	args := []string{"copy", "--quiet", "--retry-times", "2"}
	if host, _, _ := strings.Cut(ref, "/"); isLoopback(host) {
		// A registry on this machine's loopback (tests, local caches)
		// speaks plain HTTP.
		args = append(args, "--src-tls-verify=false")
	}
	args = append(args, "docker://"+ref, "oci:"+layout+":"+key)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Base{}, fmt.Errorf("%w: %s: %s (is the registry reachable, and the reference right?)", ErrPull, ref, strings.TrimSpace(out.String()))
	}
	return s.OCIBase(ctx, layout, key, opt)
}

func isLoopback(host string) bool {
	h := host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// pullKey names a pulled reference in the store's layout.
func pullKey(ref string) string {
	sum := sha256.Sum256([]byte(strings.TrimPrefix(ref, "docker://")))
	return "pull-" + hex.EncodeToString(sum[:8])
}
