package trust

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Signing for pinfold pack: the same simple-signing payloads and
// signatures that Verify checks, so that what pinfold signs verifies with
// pinfold's verifier and with cosign verify --key.

// Payload is cosign's simple-signing payload for repo@digest (repo may be
// empty for an image that has no repository yet, as an app file).
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

// LoadSigner reads an unencrypted PEM private key: PKCS#8 ("PRIVATE
// KEY", as openssl genpkey writes) or SEC 1 ("EC PRIVATE KEY"); ECDSA,
// Ed25519 or RSA. cosign's encrypted keys are opened by the pack helper
// (internal/cosignkey) before it gets here.
func LoadSigner(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("signing key %s: not PEM", path)
	}
	var key any
	switch blk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		if strings.Contains(blk.Type, "ENCRYPTED") {
			return nil, fmt.Errorf("signing key %s: an encrypted key (%s); pinfold reads cosign's encrypted keys and unencrypted PEM keys (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256)", path, blk.Type)
		}
		return nil, fmt.Errorf("signing key %s: a PEM %q, not a private key", path, blk.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("signing key %s: unsupported key type %T", path, key)
	}
	return s, nil
}

// Sign signs payload as cosign does: ECDSA and RSA over its SHA-256
// (ASN.1 and PKCS #1 v1.5), Ed25519 over the bytes.
func Sign(s crypto.Signer, payload []byte) ([]byte, error) {
	h := sha256.Sum256(payload)
	switch s.Public().(type) {
	case *ecdsa.PublicKey, *rsa.PublicKey:
		return s.Sign(rand.Reader, h[:], crypto.SHA256)
	case ed25519.PublicKey:
		return s.Sign(rand.Reader, payload, crypto.Hash(0))
	}
	return nil, fmt.Errorf("unsupported key type %T", s.Public())
}

// VerifyPayload checks that sig is a signature of payload by one of keys
// and that payload names digest; it returns the key's path.
func VerifyPayload(payload, sig []byte, digest string, keys []Key) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: no trusted key is configured (trusted_keys, or --verify-key)", ErrUnverified)
	}
	for _, k := range keys {
		if k.verify(payload, sig) {
			if err := checkPayload(payload, digest); err != nil {
				return "", fmt.Errorf("%w: %w", ErrUnverified, err)
			}
			return k.Path, nil
		}
	}
	return "", fmt.Errorf("%w: a signature none of the trusted keys made", ErrUnverified)
}

// ErrUnsigned is wrapped when there is no signature to check.
var ErrUnsigned = errors.New("not signed")
