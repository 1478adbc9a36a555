// Package pack is pinfold's side of packing a sandbox into an OCI image
// or a single-file app: the job it hands to the pinfold-pack helper, how
// it finds and starts that helper, and the checks that come before (a
// clean workspace, the files to pack). The image writing itself
// (go-containerregistry) lives in the helper, internal/packer, so that a
// plain `pinfold run` does not link it; see docs/pack.md.
package pack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/helper"
)

// HelperName is the helper's file name, looked up as PINFOLD_PACK_HELPER,
// then next to the pinfold binary, then on PATH.
const HelperName = "pinfold-pack"

// Job is what the helper is asked to do, as JSON on its stdin.
type Job struct {
	// Layers are written bottom first, one image layer each.
	Layers []Layer `json:"layers"`
	Config Config  `json:"config"`
	// Epoch is the Unix time every file time is clamped to (never later)
	// and the image's creation time.
	Epoch int64 `json:"epoch"`
	// Out is where to write the image: a directory (an OCI layout) or a
	// file (an OCI archive that docker load reads too); "" writes none.
	Out string `json:"out,omitempty"`
	// Tag names the image in what Out holds (index annotation, RepoTags).
	Tag string `json:"tag,omitempty"`
	// Push is a registry reference to push the image to.
	Push string `json:"push,omitempty"`
	// Archive writes Out as an archive whatever its name.
	Archive bool `json:"archive,omitempty"`
	// SignKey is a PEM private key to sign the image with: a cosign
	// signature image beside a pushed image, and SignatureFile in an
	// archive.
	SignKey string `json:"sign_key,omitempty"`
	// Meta, if not empty, is added to an archive as pinfold.json (an app's
	// metadata, see [AppMeta]).
	Meta json.RawMessage `json:"meta,omitempty"`
}

// Layer is a host directory packed below Prefix in the image.
type Layer struct {
	Dir    string `json:"dir"`
	Prefix string `json:"prefix,omitempty"` // "work/app"; "" for the root
	// Files, when not nil, are the only paths (relative to Dir, with
	// their parent directories) that go in; otherwise all of Dir does.
	Files []string `json:"files"` // [] is none: not omitted
	// Skip are top-level names of Dir left out (proc, dev...).
	Skip []string `json:"skip,omitempty"`
	// Overlay says Dir holds overlayfs upper directories, as an image of
	// capabilities keeps them (Dir/<top>/upper is the image's /<top>):
	// whiteouts (0:0 character devices) become OCI ".wh." files and
	// opaque directories get their ".wh..wh..opq" marker.
	Overlay bool `json:"overlay,omitempty"`
	// UIDShift is the host id that id 0 of the files was shifted to when
	// they were extracted (a root-owned store); ids in
	// [UIDShift, UIDShift+65536) are shifted back, every other id becomes 0.
	// With 0 every owner becomes 0: no host id leaks into an image.
	UIDShift uint32 `json:"uid_shift,omitempty"`
	// Parents, when set, is the host directory of the tree below this
	// layer (the base's), whose directories give Prefix's parents their
	// modes and owners (shifted back by ParentsShift): a workspace at
	// /tmp/x or /home/app/x must not turn the base's /tmp (1777) or
	// /home/app (the user's) into root's 0755.
	Parents      string `json:"parents,omitempty"`
	ParentsShift uint32 `json:"parents_shift,omitempty"`
	// Comment says what the layer is, for the image's history.
	Comment string `json:"comment,omitempty"`
	// EpochTimes sets every entry's time to the epoch, not only the later
	// ones: a workspace's file times say when it was checked out, not
	// what it holds.
	EpochTimes bool `json:"epoch_times,omitempty"`
	// GitModes keeps of a mode what git records (a file is 0755 if anyone
	// may run it, else 0644; a directory 0755; a symbolic link 0777) and
	// writes no hard links, so that any checkout of a commit packs the
	// same whatever its umask.
	GitModes bool `json:"git_modes,omitempty"`
}

// Config is the image config's run settings and labels.
type Config struct {
	Env        []string          `json:"env,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Result is what the helper answers on stdout.
type Result struct {
	// Digest is the image's manifest digest, "sha256:<hex>".
	Digest       string   `json:"digest"`
	ConfigDigest string   `json:"config_digest"`
	Layers       []string `json:"layers"` // compressed digests, bottom first
	// Size is the bytes of the manifest, config and layers.
	Size   int64  `json:"size"`
	Pushed string `json:"pushed,omitempty"` // REPO@DIGEST when pushed
	// Signature is the tag of the pushed signature image, or SignatureFile.
	Signature string `json:"signature,omitempty"`
	Error     string `json:"error,omitempty"`
	// Stage is the step that failed (Stage*), with Error.
	Stage string `json:"stage,omitempty"`
}

// Steps of a job, as a failed Result names them.
const (
	StageOut    = "out"    // the output cannot be written
	StageLayers = "layers" // a layer's files could not be read
	StagePush   = "push"   // the reference, or the registry
	StageKey    = "key"    // the signing key
)

// Error is a failed job.
type Error struct {
	Stage string
	Msg   string
}

func (e *Error) Error() string { return e.Msg }

// Labels pinfold sets on the images it packs.
const (
	LabelSandboxID = "org.pinfold.sandbox-id"
	LabelBaseID    = "org.pinfold.base-id"
	LabelWorkspace = "org.pinfold.workspace"
	LabelCaps      = "org.pinfold.capabilities"
)

// Files pinfold adds to an archive besides the OCI layout and docker's
// manifest.json.
const (
	// MetaFile is an app's metadata, [AppMeta].
	MetaFile = "pinfold.json"
	// SignatureFile is the archive's signature, [Signature].
	SignatureFile = "pinfold-signature.json"
	// RootFile is an app's merged root filesystem as a squashfs image,
	// stored uncompressed in the archive so that it can be mounted at its
	// offset in the file ([RootImage]).
	RootFile = "pinfold-root.squashfs"
)

// Signature is an embedded cosign-style signature: a simple-signing
// payload naming the manifest digest, and its signature.
type Signature struct {
	Payload   []byte `json:"payload"`   // base64 in JSON
	Signature []byte `json:"signature"` // base64 in JSON
}

// AppMeta is what an app file says about itself.
type AppMeta struct {
	Format    string `json:"format"` // AppFormat
	SandboxID string `json:"sandbox_id,omitempty"`
	BaseID    string `json:"base_id,omitempty"`
	Tag       string `json:"tag,omitempty"`
	// Root describes RootFile, when the app has one.
	Root *RootImage `json:"root,omitempty"`
}

// RootImage is the squashfs of an app's merged layers: what a run mounts
// instead of unpacking the layers (see docs/pack.md).
type RootImage struct {
	Digest string `json:"digest"` // sha256 of the squashfs bytes
	Size   int64  `json:"size"`
	// Top lists the image's top-level entries, which the sandbox shows
	// one by one around its own /dev, /proc, /sys and /tmp.
	Top []RootEntry `json:"top"`
}

// RootEntry is one top-level entry of a RootImage.
type RootEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // "dir", "file" or "symlink"
	Mode uint32 `json:"mode"` // permission bits
	Link string `json:"link,omitempty"`
}

// AppFormat is the format of app files this pinfold writes and runs.
const AppFormat = "pinfold-app/1"

// ErrNoHelper is wrapped when the helper cannot be found.
var ErrNoHelper = errors.New("the pinfold-pack helper is not installed")

// HelperPath finds the helper (helper.Find).
func HelperPath() (string, error) {
	p, err := helper.Find(HelperName, "PINFOLD_PACK_HELPER")
	if err != nil {
		return "", fmt.Errorf("%w: %s is neither beside pinfold nor on PATH", ErrNoHelper, HelperName)
	}
	return p, nil
}

// Run hands job to the helper and returns its result.
func Run(ctx context.Context, job *Job) (*Result, error) {
	helper, err := HelperPath()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, helper)
	// Asked to stop, the helper removes its temporary files first.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Dir = "/"
	runErr := cmd.Run()
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("%s: %v: %s", HelperName, runErr, strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("%s answered %q: %v", HelperName, out.String(), err)
	}
	if res.Error != "" {
		return nil, &Error{Stage: res.Stage, Msg: res.Error}
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s: %v: %s", HelperName, runErr, strings.TrimSpace(stderr.String()))
	}
	return &res, nil
}
