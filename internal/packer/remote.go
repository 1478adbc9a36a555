package packer

import (
	"context"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// remoteWrite pushes img to ref with the credentials of docker's and
// podman's config files, if any. A registry on loopback or localhost is
// spoken to over plain HTTP (go-containerregistry's rule).
func remoteWrite(ctx context.Context, ref name.Reference, img v1.Image) error {
	return remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
}
