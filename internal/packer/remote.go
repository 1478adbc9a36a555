package packer

import (
	"context"
	"encoding/base64"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pinfold/pinfold/internal/pack"
)

// remoteWrite pushes img to ref with the credentials of docker's and
// podman's config files, if any. A registry on loopback or localhost is
// spoken to over plain HTTP (go-containerregistry's rule).
func remoteWrite(ctx context.Context, ref name.Reference, img v1.Image) error {
	return remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

// pushSignature pushes sig as cosign does: an image whose one layer is
// the payload, with the signature in its annotation, tagged
// sha256-HEX.sig in the image's repository. It returns that tag.
func pushSignature(ctx context.Context, ref name.Reference, digest string, sig *pack.Signature) (string, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:       static.NewLayer(sig.Payload, "application/vnd.dev.cosign.simplesigning.v1+json"),
		Annotations: map[string]string{"dev.cosignproject.cosign/signature": base64.StdEncoding.EncodeToString(sig.Signature)},
	})
	if err != nil {
		return "", err
	}
	tag := ref.Context().Tag(strings.Replace(digest, ":", "-", 1) + ".sig")
	return tag.String(), remoteWrite(ctx, tag, img)
}
