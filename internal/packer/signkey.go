package packer

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/pinfold/pinfold/internal/cosignkey"
	"github.com/pinfold/pinfold/internal/trust"
)

// loadSigner reads --sign-key: a key `cosign generate-key-pair` wrote,
// opened with COSIGN_PASSWORD as cosign does, or an unencrypted PEM key
// (trust.LoadSigner).
func loadSigner(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || !cosignkey.Is(blk) {
		return trust.LoadSigner(path)
	}
	pass, ok := os.LookupEnv("COSIGN_PASSWORD")
	if !ok {
		return nil, fmt.Errorf("signing key %s: a cosign key, encrypted: set COSIGN_PASSWORD to its password (empty if it has none)", path)
	}
	der, err := cosignkey.Decrypt(blk, []byte(pass))
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: the decrypted key: %w", path, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("signing key %s: unsupported key type %T", path, key)
	}
	return s, nil
}
