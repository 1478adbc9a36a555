package trust

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSignVerifies: what Sign makes, VerifyPayload accepts with the
// public half, for each key type and file form LoadSigner reads; another
// key, altered bytes and another digest are refused.
func TestSignVerifies(t *testing.T) {
	dir := t.TempDir()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	pkcs8 := func(k any) []byte { b, _ := x509.MarshalPKCS8PrivateKey(k); return b }
	digest := "sha256:" + strings.Repeat("ab", 32)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey := Key{Path: "other", pub: &other.PublicKey}
	for _, c := range []struct {
		name, typ string
		der       []byte
		pub       crypto.PublicKey
	}{
		{"ecdsa-sec1", "EC PRIVATE KEY", sec1, &ec.PublicKey},
		{"ecdsa-pkcs8", "PRIVATE KEY", pkcs8(ec), &ec.PublicKey},
		{"ed25519", "PRIVATE KEY", pkcs8(ed), ed.Public()},
		{"rsa", "PRIVATE KEY", pkcs8(rs), &rs.PublicKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".pem")
			os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: c.typ, Bytes: c.der}), 0o600)
			s, err := LoadSigner(p)
			if err != nil {
				t.Fatal(err)
			}
			payload := Payload("registry.test/app", digest)
			sig, err := Sign(s, payload)
			if err != nil {
				t.Fatal(err)
			}
			keys := []Key{otherKey, {Path: "good", pub: c.pub}}
			if k, err := VerifyPayload(payload, sig, digest, keys); err != nil || k != "good" {
				t.Fatalf("verify: %q %v", k, err)
			}
			if _, err := VerifyPayload(payload, sig, "sha256:"+strings.Repeat("cd", 32), keys); !errors.Is(err, ErrUnverified) {
				t.Errorf("another digest: %v", err)
			}
			if _, err := VerifyPayload(append(payload, ' '), sig, digest, keys); !errors.Is(err, ErrUnverified) {
				t.Errorf("altered payload: %v", err)
			}
			if _, err := VerifyPayload(payload, sig, digest, []Key{otherKey}); !errors.Is(err, ErrUnverified) {
				t.Errorf("another key: %v", err)
			}
		})
	}
	enc := filepath.Join(dir, "cosign.key")
	os.WriteFile(enc, pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("x")}), 0o600)
	if _, err := LoadSigner(enc); err == nil || !strings.Contains(err.Error(), "encrypted") {
		t.Errorf("an encrypted cosign key: %v", err)
	}
}
