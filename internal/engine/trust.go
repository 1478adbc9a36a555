package engine

import (
	"context"
	"errors"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/trust"
)

// verifyImage checks the signature of the plan's registry image against
// its trusted keys and returns the reference by the verified digest.
func (e *Engine) verifyImage(ctx context.Context, p *plan.Plan, ref string) (string, error) {
	keys, err := trust.LoadKeys(p.Image.Keys)
	if err != nil {
		return "", fault.New(fault.Unverified, "cannot read the trusted keys: "+err.Error(), "",
			"give PEM public keys (cosign.pub) in trusted_keys or --verify-key", err)
	}
	v, err := trust.Verify(ctx, ref, keys)
	if err != nil {
		return "", fault.New(fault.Unverified, err.Error(),
			"verify_signature is set (from "+p.Sources["verify_signature"]+"): pinfold runs only an image whose cosign signature verifies with a trusted key",
			"sign the image (cosign sign --key cosign.key IMAGE), trust the key that signed it, or check the reference", err)
	}
	e.notice("verified the signature of %s (%s) with %s", ref, v.Digest, v.Key)
	return v.Pinned, nil
}

// verifyArchive checks the signature embedded in an image file pinfold
// packed (an app, or pack image --sign-key's FILE.tar) against the plan's
// trusted keys, offline, and returns the reference the run must use: the
// signed manifest's digest for an OCI archive, the file's own reference
// for one docker reads too (whose manifest.json Verify checked).
func (e *Engine) verifyArchive(p *plan.Plan, path string) (string, error) {
	keys, err := trust.LoadKeys(p.Image.Keys)
	if err != nil {
		return "", fault.New(fault.Unverified, "cannot read the trusted keys: "+err.Error(), "",
			"give PEM public keys (cosign.pub) in trusted_keys or --verify-key", err)
	}
	a, err := pack.ReadArchive(path)
	if err == nil {
		var key string
		if key, err = trust.VerifyArchive(a, keys); err == nil {
			e.notice("verified the signature of %s (%s) with %s", path, a.Digest, key)
			if a.Docker != nil {
				return p.Sandbox.Base.Ref, nil
			}
			return a.Digest, nil
		}
	}
	fix := "sign it (pinfold pack ... --sign-key KEY), trust the key that signed it, or check the file"
	if errors.Is(err, pack.ErrNotArchive) {
		fix = "only image files pinfold pack wrote carry a signature pinfold checks; use a signed registry image otherwise"
	}
	return "", fault.New(fault.Unverified, err.Error(),
		"verify_signature is set (from "+p.Sources["verify_signature"]+"): pinfold runs only an image whose signature verifies with a trusted key", fix, err)
}
