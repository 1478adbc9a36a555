// Package cosignkey reads the private keys `cosign generate-key-pair`
// writes: a PEM block ("ENCRYPTED SIGSTORE PRIVATE KEY", or "ENCRYPTED
// COSIGN PRIVATE KEY" from older cosign) holding JSON that names the key
// derivation (scrypt), the cipher (NaCl secretbox) and the sealed PKCS #8
// key. It is linked by the pinfold-pack helper only, which signs.
package cosignkey

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// Is reports whether blk is a cosign encrypted private key.
func Is(blk *pem.Block) bool {
	return blk.Type == "ENCRYPTED SIGSTORE PRIVATE KEY" || blk.Type == "ENCRYPTED COSIGN PRIVATE KEY"
}

type sealed struct {
	KDF struct {
		Name   string `json:"name"`
		Params struct {
			N, R, P int
		} `json:"params"`
		Salt []byte `json:"salt"`
	} `json:"kdf"`
	Cipher struct {
		Name  string `json:"name"`
		Nonce []byte `json:"nonce"`
	} `json:"cipher"`
	Ciphertext []byte `json:"ciphertext"`
}

// ErrPassword is a password that does not open the key.
var ErrPassword = errors.New("wrong password (COSIGN_PASSWORD)")

// Bounds on scrypt's cost, which the file chooses: cosign uses N = 2^15,
// r = 8, p = 1; a file asking for far more would take the helper's memory
// and minutes (128·N·r·p bytes).
const (
	maxN = 1 << 20
	maxR = 32
	maxP = 16
)

// Decrypt opens blk with password and returns the DER (PKCS #8) key.
func Decrypt(blk *pem.Block, password []byte) ([]byte, error) {
	var s sealed
	if err := json.Unmarshal(blk.Bytes, &s); err != nil {
		return nil, fmt.Errorf("a cosign key that is not cosign's format: %w", err)
	}
	p := s.KDF.Params
	switch {
	case s.KDF.Name != "scrypt" || s.Cipher.Name != "nacl/secretbox":
		return nil, fmt.Errorf("a cosign key sealed with %q and %q; pinfold reads scrypt and nacl/secretbox", s.KDF.Name, s.Cipher.Name)
	case p.N < 2 || p.N > maxN || p.N&(p.N-1) != 0 || p.R < 1 || p.R > maxR || p.P < 1 || p.P > maxP:
		return nil, fmt.Errorf("a cosign key whose scrypt parameters (N=%d r=%d p=%d) are out of bounds", p.N, p.R, p.P)
	case len(s.Cipher.Nonce) != 24 || len(s.KDF.Salt) == 0:
		return nil, errors.New("a cosign key with a malformed nonce or salt")
	}
	k, err := scrypt.Key(password, s.KDF.Salt, p.N, p.R, p.P, 32)
	if err != nil {
		return nil, err
	}
	var key [32]byte
	var nonce [24]byte
	copy(key[:], k)
	copy(nonce[:], s.Cipher.Nonce)
	der, ok := secretbox.Open(nil, s.Ciphertext, &nonce, &key)
	if !ok {
		return nil, ErrPassword
	}
	return der, nil
}
