package cosignkey

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/nacl/secretbox"
	"golang.org/x/crypto/scrypt"
)

// seal writes what cosign writes, with the given scrypt cost (its
// interoperation with cosign itself is TestCosignInterop's, in
// internal/cli).
func seal(t *testing.T, der, password []byte, n, r, p int) *pem.Block {
	var s sealed
	s.KDF.Name, s.Cipher.Name = "scrypt", "nacl/secretbox"
	s.KDF.Params.N, s.KDF.Params.R, s.KDF.Params.P = n, r, p
	s.KDF.Salt = []byte("0123456789abcdef0123456789abcdef")
	s.Cipher.Nonce = []byte("0123456789abcdef01234567")
	k, err := scrypt.Key(password, s.KDF.Salt, 1<<10, 8, 1, 32) // cheap: the key for the tests that open it
	if err != nil {
		t.Fatal(err)
	}
	var key [32]byte
	var nonce [24]byte
	copy(key[:], k)
	copy(nonce[:], s.Cipher.Nonce)
	s.Ciphertext = secretbox.Seal(nil, der, &nonce, &key)
	b, _ := json.Marshal(s)
	return &pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: b}
}

func TestDecrypt(t *testing.T) {
	blk := seal(t, []byte("the key"), []byte("pw"), 1<<10, 8, 1)
	if !Is(blk) {
		t.Fatal("not recognised")
	}
	if der, err := Decrypt(blk, []byte("pw")); err != nil || string(der) != "the key" {
		t.Fatalf("%q %v", der, err)
	}
	if _, err := Decrypt(blk, []byte("other")); !errors.Is(err, ErrPassword) {
		t.Fatalf("wrong password: %v", err)
	}
}

// A file chooses scrypt's cost: one that asks for gigabytes or hours is
// refused before scrypt runs, as are other ciphers and malformed fields.
func TestDecryptRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		n, r, p int
		edit    func(*sealed)
		want    string
	}{
		"huge N":        {1 << 30, 8, 1, nil, "out of bounds"},
		"N not a power": {1000, 8, 1, nil, "out of bounds"},
		"huge r":        {1 << 10, 1 << 20, 1, nil, "out of bounds"},
		"huge p":        {1 << 10, 8, 1 << 20, nil, "out of bounds"},
		"zero":          {0, 0, 0, nil, "out of bounds"},
		"other kdf":     {1 << 10, 8, 1, func(s *sealed) { s.KDF.Name = "pbkdf2" }, "pinfold reads scrypt"},
		"other cipher":  {1 << 10, 8, 1, func(s *sealed) { s.Cipher.Name = "aes-gcm" }, "pinfold reads scrypt"},
		"short nonce":   {1 << 10, 8, 1, func(s *sealed) { s.Cipher.Nonce = s.Cipher.Nonce[:8] }, "malformed"},
		"no salt":       {1 << 10, 8, 1, func(s *sealed) { s.KDF.Salt = nil }, "malformed"},
	} {
		blk := seal(t, []byte("k"), nil, c.n, c.r, c.p)
		if c.edit != nil {
			var s sealed
			json.Unmarshal(blk.Bytes, &s)
			c.edit(&s)
			blk.Bytes, _ = json.Marshal(s)
		}
		if _, err := Decrypt(blk, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if _, err := Decrypt(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("{")}, nil); err == nil {
		t.Error("malformed JSON accepted")
	}
}
