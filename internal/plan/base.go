package plan

import (
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
)

func parseBase(s, dir, home string) (sandbox.Base, error) {
	kind, path, _ := strings.Cut(s, ":")
	switch {
	case s == "" || s == "host":
		return sandbox.Base{Kind: sandbox.BaseHost}, nil
	case s == "debian-12":
		return sandbox.Base{Kind: sandbox.BaseDebian12}, nil
	case (kind == "dir" || kind == "tar") && path != "":
		return sandbox.Base{Kind: sandbox.BaseKind(kind), Path: hostPath(path, dir, home)}, nil
	case kind == "oci" && store.IsReference(path):
		// A registry reference: pulled into the store on first use.
		return sandbox.Base{Kind: sandbox.BaseOCI, Ref: strings.TrimPrefix(path, "docker://")}, nil
	case kind == "oci" && path != "":
		// oci:PATH or oci:PATH:REF, as podman writes them; the path ends
		// at its first ':' so that a REF may hold colons (alpine:3.19,
		// sha256:...).
		ref := ""
		if i := strings.IndexByte(path, ':'); i > 0 {
			path, ref = path[:i], path[i+1:]
		}
		return sandbox.Base{Kind: sandbox.BaseOCI, Path: hostPath(path, dir, home), Ref: ref}, nil
	}
	return sandbox.Base{}, badValue("base", s, "host, debian-12, dir:PATH, tar:PATH or oci:PATH[:REF]")
}

func trustLevel(b sandbox.Base) string {
	switch {
	case b.Kind == sandbox.BaseHost:
		return TrustHost
	case b.Kind == sandbox.BaseOCI && b.Path == "" && store.Pinned(b.Ref):
		return TrustPinned
	case b.Kind == sandbox.BaseOCI && b.Path == "":
		return TrustMutable
	}
	return TrustLocal
}

// resolveImagePolicy merges require_pinned_image, verify_signature and
// trusted_keys, and refuses what they rule out.
func resolveImagePolicy(r *Request, ls []layer, p *Plan) error {
	ip := &p.Image
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.RequirePinnedImage; v != nil {
			ip.RequirePinned = *v
			p.Sources["require_pinned_image"] = ls[i].label("require_pinned_image")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.VerifySignature; v != nil {
			ip.Verify = *v
			p.Sources["verify_signature"] = ls[i].label("verify_signature")
			break
		}
	}
	for i := len(ls) - 1; i >= 0; i-- {
		if v := ls[i].s.TrustedKeys; v != nil {
			for _, k := range v {
				ip.Keys = append(ip.Keys, hostPath(k, layerDir(ls, i, r.Cwd), r.Home))
			}
			p.Sources["trusted_keys"] = ls[i].label("trusted_keys")
			break
		}
	}
	b := p.Sandbox.Base
	registry := b.Kind == sandbox.BaseOCI && b.Path == ""
	if ip.RequirePinned && registry && !store.Pinned(b.Ref) {
		return fault.New(fault.Unpinned, "the image "+b.Ref+" is named by a tag, and require_pinned_image is set (from "+p.Sources["require_pinned_image"]+")",
			"a tag may name other content tomorrow; a digest names one manifest",
			"name it by digest: oci:"+repoOf(b.Ref)+"@sha256:... (skopeo inspect docker://"+b.Ref+" shows it)", nil)
	}
	if ip.Verify {
		// An image file carries its signature inside (pinfold pack --sign-key).
		if !registry && b.Kind != sandbox.BaseOCI {
			return fault.New(fault.Unverified, "verify_signature is set (from "+p.Sources["verify_signature"]+"), but the base "+string(b.Kind)+" is no image",
				"signatures are checked for registry images (oci:HOST/REPO...) and image files pinfold pack signed; pinfold never runs a plan with less checking than it asks for",
				"use a signed image, or set verify_signature: false for this base", nil)
		}
		if len(ip.Keys) == 0 {
			return fault.New(fault.Unverified, "verify_signature is set, but no trusted key is given", "",
				"list PEM public keys in trusted_keys, or give --verify-key FILE", nil)
		}
	}
	return nil
}

func repoOf(ref string) string {
	r, _ := store.SplitReference(ref)
	return r
}

func trustOf(b sandbox.Base) string {
	switch b.Kind {
	case sandbox.BaseTar:
		return "tar base: extracted by content digest (sha256), no signature checked"
	case sandbox.BaseDir:
		return "dir base: used as it is, nothing verified"
	case sandbox.BaseDebian12:
		return "debian-12: built by pinfold with debootstrap from the machine's Debian mirror (apt verifies the packages' signatures); named by the digest of its tree"
	case sandbox.BaseOCI:
		return "oci base: layers checked against their sha256 digests, no signature checked"
	}
	return "host base: the host's own system directories, read-only"
}

// hostPath resolves a host path written relative to dir, with ~ for home.
func hostPath(p, dir, home string) string {
	switch {
	case p == "~":
		return home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// parseMount reads SRC:DST[:ro|rw].
func parseMount(s string) (config.Mount, error) {
	parts := strings.Split(s, ":")
	var m config.Mount
	switch {
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		m.ReadOnly = parts[2] == "ro"
	case len(parts) == 2:
	default:
		return m, badValue("--mount", s, "SRC:DST or SRC:DST:ro")
	}
	m.Source, m.Target = parts[0], parts[1]
	if m.Source == "" || !filepath.IsAbs(m.Target) {
		return m, badValue("--mount", s, "SRC:DST with an absolute DST")
	}
	return m, nil
}

func validHostname(h string) bool {
	if len(h) > 64 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
