package engine

import (
	"context"

	"github.com/pinfold/pinfold/internal/fault"
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
