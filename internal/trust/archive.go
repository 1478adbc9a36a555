package trust

import (
	"fmt"
	"slices"

	"github.com/pinfold/pinfold/internal/pack"
)

// VerifyArchive checks the signature embedded in an image file pinfold
// packed (an app, or pack image --sign-key's FILE.tar) against keys, and
// returns the path of the key that made it. A docker manifest.json, if
// any, must name the signed manifest's config and layers, so that a
// reader that takes that path runs the signed image too.
func VerifyArchive(a *pack.Archive, keys []Key) (string, error) {
	if a.Signature == nil {
		return "", fmt.Errorf("%w: %s is %w", ErrUnverified, a.Path, ErrUnsigned)
	}
	key, err := VerifyPayload(a.Signature.Payload, a.Signature.Signature, a.Digest, keys)
	if err != nil {
		return "", fmt.Errorf("%s: %w", a.Path, err)
	}
	if a.Docker != nil {
		want := pack.DockerManifest{Config: "blobs/sha256/" + a.Manifest.Config.Digest[min(7, len(a.Manifest.Config.Digest)):]}
		for _, l := range a.Manifest.Layers {
			want.Layers = append(want.Layers, "blobs/sha256/"+l.Digest[min(7, len(l.Digest)):])
		}
		if len(a.Docker) != 1 || a.Docker[0].Config != want.Config || !slices.Equal(a.Docker[0].Layers, want.Layers) {
			return "", fmt.Errorf("%w: %s: manifest.json names another image than the signed manifest", ErrUnverified, a.Path)
		}
	}
	return key, nil
}
