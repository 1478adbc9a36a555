// Package trust decides whether an image from a registry may be used: it
// checks a cosign signature of the image's manifest against public keys
// the user trusts, offline (no transparency log, no certificate
// authority), and names the digest that was verified, so that the run
// uses exactly that manifest and not whatever the tag names a moment
// later.
//
// A cosign signature of image REPO@sha256:HEX lives in the same
// repository under the tag sha256-HEX.sig: an image whose layers are
// "simple signing" payloads (JSON naming the signed manifest digest),
// each with its signature, base64, in the layer annotation
// dev.cosignproject.cosign/signature. The signature is over the payload's
// bytes with the key's hash (SHA-256 for cosign's ECDSA P-256 keys).
//
// The registry is reached with skopeo, as pinfold's pulls are (the
// machine's registries.conf, mirrors and credentials apply).
package trust

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/store"
)

// ErrUnverified is wrapped by every failed verification.
var ErrUnverified = errors.New("the image's signature could not be verified")

// Key is a trusted public key.
type Key struct {
	Path string
	pub  crypto.PublicKey
}

// LoadKeys reads PEM public keys (cosign.pub, or any PKIX "PUBLIC KEY":
// ECDSA, Ed25519 or RSA).
func LoadKeys(paths []string) ([]Key, error) {
	var keys []Key
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", p, err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil || blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("trusted key %s: not a PEM public key (want -----BEGIN PUBLIC KEY-----, as cosign generate-key-pair writes cosign.pub)", p)
		}
		pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("trusted key %s: %w", p, err)
		}
		switch pub.(type) {
		case *ecdsa.PublicKey, ed25519.PublicKey, *rsa.PublicKey:
		default:
			return nil, fmt.Errorf("trusted key %s: unsupported key type %T", p, pub)
		}
		keys = append(keys, Key{Path: p, pub: pub})
	}
	return keys, nil
}

// Verified is an image whose signature checked out.
type Verified struct {
	// Pinned is the reference by digest: REPO@sha256:HEX.
	Pinned string
	Digest string
	// Key is the trusted key that verified it.
	Key string
}

// Verify resolves ref (HOST/REPO[:TAG|@DIGEST]) to its manifest digest and
// checks that a signature of that digest verifies with one of keys.
func Verify(ctx context.Context, ref string, keys []Key) (*Verified, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no trusted key is configured (trusted_keys, or --verify-key)", ErrUnverified)
	}
	repo, _ := SplitReference(ref)
	manifest, err := inspectRaw(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", ErrUnverified, ref, err)
	}
	sum := sha256.Sum256(manifest)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if _, d := SplitReference(ref); strings.HasPrefix(d, "sha256:") && d != digest {
		return nil, fmt.Errorf("%w: the registry's manifest for %s has digest %s", ErrUnverified, ref, digest)
	}
	sigRef := repo + ":sha256-" + hex.EncodeToString(sum[:]) + ".sig"
	dir, err := os.MkdirTemp("", "pinfold-sig-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := skopeo(ctx, nil, "copy", "--quiet", tlsFlag(ref, "--src-tls-verify"), "docker://"+sigRef, "dir:"+dir); err != nil {
		return nil, fmt.Errorf("%w: %s has no signature (%s): %w", ErrUnverified, ref, sigRef, err)
	}
	var m struct {
		Layers []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil || json.Unmarshal(b, &m) != nil {
		return nil, fmt.Errorf("%w: the signature image %s is malformed", ErrUnverified, sigRef)
	}
	var why []string
	for _, l := range m.Layers {
		sig, err := base64.StdEncoding.DecodeString(l.Annotations["dev.cosignproject.cosign/signature"])
		if err != nil || len(sig) == 0 {
			why = append(why, "a layer without a signature")
			continue
		}
		payload, err := os.ReadFile(filepath.Join(dir, strings.TrimPrefix(l.Digest, "sha256:")))
		if err != nil {
			why = append(why, "a layer whose payload is missing")
			continue
		}
		if ps := sha256.Sum256(payload); "sha256:"+hex.EncodeToString(ps[:]) != l.Digest {
			why = append(why, "a payload that does not match its digest")
			continue
		}
		for _, k := range keys {
			if !k.verify(payload, sig) {
				continue
			}
			if err := checkPayload(payload, digest); err != nil {
				why = append(why, err.Error())
				continue
			}
			return &Verified{Pinned: repo + "@" + digest, Digest: digest, Key: k.Path}, nil
		}
		why = append(why, "a signature none of the trusted keys made")
	}
	if len(why) == 0 {
		why = append(why, "no signatures")
	}
	return nil, fmt.Errorf("%w: %s (%s): %s", ErrUnverified, ref, digest, strings.Join(why, "; "))
}

// checkPayload reads a simple-signing payload and checks it names digest.
func checkPayload(payload []byte, digest string) error {
	var p struct {
		Critical struct {
			Type  string `json:"type"`
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return errors.New("a signed payload that is not simple-signing JSON")
	}
	if p.Critical.Type != "cosign container image signature" {
		return fmt.Errorf("a signed payload of type %q", p.Critical.Type)
	}
	if p.Critical.Image.Digest != digest {
		return fmt.Errorf("a signature of another manifest (%s)", p.Critical.Image.Digest)
	}
	return nil
}

func (k Key) verify(payload, sig []byte) bool {
	h := sha256.Sum256(payload)
	switch pub := k.pub.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(pub, h[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(pub, payload, sig)
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig) == nil ||
			rsa.VerifyPSS(pub, crypto.SHA256, h[:], sig, nil) == nil
	}
	return false
}

// SplitReference splits a reference into repository and tag or digest.
func SplitReference(ref string) (repo, tagOrDigest string) { return store.SplitReference(ref) }

// Pinned reports whether ref names its manifest by digest.
func Pinned(ref string) bool { return store.Pinned(ref) }

func inspectRaw(ctx context.Context, ref string) ([]byte, error) {
	var out bytes.Buffer
	if err := skopeo(ctx, &out, "inspect", "--raw", tlsFlag(ref, "--tls-verify"), "docker://"+strings.TrimPrefix(ref, "docker://")); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// tlsFlag turns TLS verification off for a registry on loopback, which
// speaks plain HTTP (tests, local caches), as pinfold's pulls do.
func tlsFlag(ref, flag string) string {
	host, _, _ := strings.Cut(strings.TrimPrefix(ref, "docker://"), "/")
	h := host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.Trim(h, "[]")
	a, err := netip.ParseAddr(h)
	if h == "localhost" || err == nil && a.IsLoopback() {
		return flag + "=false"
	}
	return flag + "=true"
}

func skopeo(ctx context.Context, stdout *bytes.Buffer, args ...string) error {
	tool, err := exec.LookPath("skopeo")
	if err != nil {
		return errors.New("verifying signatures needs skopeo (apt-get install skopeo)")
	}
	cmd := exec.CommandContext(ctx, tool, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		return fmt.Errorf("skopeo %s: %s", args[0], msg)
	}
	return nil
}

// SelfTest signs a payload with a fresh key and verifies it the way
// Verify does: whether this build can verify signatures at all.
func SelfTest() error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	digest := "sha256:" + strings.Repeat("0", 64)
	payload := []byte(`{"critical":{"identity":{"docker-reference":"self.test/x"},"image":{"docker-manifest-digest":"` + digest + `"},"type":"cosign container image signature"},"optional":null}`)
	h := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, priv, h[:])
	if err != nil {
		return err
	}
	k := Key{pub: &priv.PublicKey}
	if !k.verify(payload, sig) {
		return errors.New("a signature made here does not verify")
	}
	if k.verify(append(payload, ' '), sig) {
		return errors.New("a signature verifies over altered bytes")
	}
	return checkPayload(payload, digest)
}
