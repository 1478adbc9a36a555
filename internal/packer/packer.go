// Package packer is the pinfold-pack helper: it reads a [pack.Job] on
// stdin, writes the job's layers as deterministic gzip tars, assembles
// the image with go-containerregistry, writes it as an OCI layout or
// archive and pushes it, and answers a [pack.Result] on stdout. It is
// linked into cmd/pinfold-pack only (see internal/pack).
//
// Determinism: entries in walk order with names in byte order, times
// clamped to the job's epoch and cut to the second, owners shifted back
// or 0, no user or group names, no access or change times, one fixed gzip
// level, and a config whose every time is the epoch. The same job on the
// same files gives the same bytes, so the same digest.
package packer

import (
	"archive/tar"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/trust"
)

// Main runs one job from stdin and returns the exit status.
func Main() int {
	var job pack.Job
	res := &pack.Result{}
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	err := dec.Decode(&job)
	if err == nil {
		// pinfold sends SIGTERM when its own context ends; Ctrl-C reaches
		// the whole process group. Either stops the work and removes its
		// temporary files.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		res, err = Do(ctx, &job)
		stop()
	}
	if err != nil {
		res = &pack.Result{Error: err.Error()}
		var se *stageError
		if errors.As(err, &se) {
			res.Stage = se.stage
		}
	}
	json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		return 1
	}
	return 0
}

// Do runs job.
func Do(ctx context.Context, job *pack.Job) (*pack.Result, error) {
	epoch := time.Unix(job.Epoch, 0).UTC()
	pushRef, signer, err := prepare(job)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(workDir(job.Out), ".pinfold-pack-")
	if err != nil {
		return nil, staged(pack.StageOut, err)
	}
	defer os.RemoveAll(work)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	// Layers are written where the layout keeps them, under their digest:
	// writing the layout then finds them there and copies nothing.
	blobs := filepath.Join(work, "layout", "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	img, written, err := appendLayers(ctx, img, job, epoch, blobs)
	if err != nil {
		return nil, err
	}
	rootFile := ""
	if len(job.Meta) > 0 && job.Out != "" {
		// An app: its merged root as a squashfs a run can mount.
		rootFile = filepath.Join(work, pack.RootFile)
		root, err := writeRoot(ctx, written, epoch, rootFile)
		if err != nil {
			return nil, staged(pack.StageLayers, fmt.Errorf("writing the root image: %w", err))
		}
		if root == nil {
			rootFile = ""
		} else if job.Meta, err = withRoot(job.Meta, root); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch}
	c := job.Config
	cf.Config = v1.Config{Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, Labels: c.Labels}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	res, err := describe(img)
	if err != nil {
		return nil, err
	}
	if job.Out != "" {
		var sig *pack.Signature
		if signer != nil {
			repo := ""
			if job.Tag != "" {
				if ref, err := name.ParseReference(job.Tag); err == nil {
					repo = ref.Context().Name()
				}
			}
			if sig, err = sign(signer, repo, res.Digest); err != nil {
				return nil, staged(pack.StageKey, err)
			}
			res.Signature = pack.SignatureFile
		}
		if err := write(img, job, sig, epoch, work, rootFile); err != nil {
			return nil, staged(pack.StageOut, err)
		}
	}
	if pushRef != nil {
		if err := push(ctx, pushRef, job.Push, img, signer, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// prepare refuses what can be refused before any work: the output, the
// push reference and the signing key, which it loads.
func prepare(job *pack.Job) (name.Reference, crypto.Signer, error) {
	if err := checkOut(job); err != nil {
		return nil, nil, staged(pack.StageOut, err)
	}
	var pushRef name.Reference
	if job.Push != "" {
		r, err := name.ParseReference(job.Push)
		if err != nil {
			return nil, nil, staged(pack.StagePush, fmt.Errorf("--push %s: %w", job.Push, err))
		}
		pushRef = r
	}
	var signer crypto.Signer
	if job.SignKey != "" {
		if job.Out != "" && !job.Archive && !isArchive(job.Out) {
			return nil, nil, staged(pack.StageOut, fmt.Errorf("a signature goes into an archive (--out FILE.tar) or beside a pushed image (--push), not into a layout directory"))
		}
		s, err := loadSigner(job.SignKey)
		if err != nil {
			return nil, nil, staged(pack.StageKey, err)
		}
		signer = s
	}
	return pushRef, signer, nil
}

// appendLayers writes the job's layers into blobs, each under its digest,
// and appends them to img.
func appendLayers(ctx context.Context, img v1.Image, job *pack.Job, epoch time.Time, blobs string) (v1.Image, []*fileLayer, error) {
	var written []*fileLayer
	for i, l := range job.Layers {
		fl, err := writeLayer(ctx, l, epoch, filepath.Join(blobs, fmt.Sprintf(".layer%d", i)))
		if err != nil {
			return nil, nil, staged(pack.StageLayers, fmt.Errorf("packing %s: %w", l.Dir, err))
		}
		final := filepath.Join(blobs, fl.digest.Hex)
		if err := os.Rename(fl.path, final); err != nil {
			return nil, nil, err
		}
		fl.path = final
		written = append(written, fl)
		img, err = mutate.Append(img, mutate.Addendum{Layer: fl, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "pinfold pack", Comment: l.Comment}})
		if err != nil {
			return nil, nil, err
		}
	}
	return img, written, nil
}

// push pushes img to ref (given as to), and with signer its signature
// beside it.
func push(ctx context.Context, ref name.Reference, to string, img v1.Image, signer crypto.Signer, res *pack.Result) error {
	if err := remoteWrite(ctx, ref, img); err != nil {
		return staged(pack.StagePush, fmt.Errorf("pushing to %s: %w", to, err))
	}
	res.Pushed = ref.Context().Digest(res.Digest).String()
	if signer == nil {
		return nil
	}
	sig, err := sign(signer, ref.Context().Name(), res.Digest)
	if err != nil {
		return staged(pack.StageKey, err)
	}
	tag, err := pushSignature(ctx, ref, res.Digest, sig)
	if err != nil {
		return staged(pack.StagePush, fmt.Errorf("pushing the signature to %s: %w", to, err))
	}
	res.Signature = tag
	return nil
}

func describe(img v1.Image) (*pack.Result, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	raw, _ := img.RawManifest()
	res := &pack.Result{Digest: d.String(), ConfigDigest: cd.String(), Size: int64(len(raw)) + m.Config.Size}
	for _, l := range m.Layers {
		res.Layers = append(res.Layers, l.Digest.String())
		res.Size += l.Size
	}
	return res, nil
}

// checkOut refuses an output that cannot be written before any work.
func checkOut(job *pack.Job) error {
	if job.Out == "" {
		return nil
	}
	st, err := os.Stat(job.Out)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return err
	case st.IsDir() && job.Archive:
		return fmt.Errorf("%s is a directory, not a file", job.Out)
	case st.IsDir():
		if ents, err := os.ReadDir(job.Out); err != nil || len(ents) > 0 {
			return fmt.Errorf("%s is a directory that is not empty", job.Out)
		}
	}
	return nil
}

// workDir is where temporary files go: beside the output, so that the
// final rename stays on one file system.
func workDir(out string) string {
	if out == "" {
		return ""
	}
	return filepath.Dir(filepath.Clean(out))
}

// isArchive tells an archive output (FILE.tar, APP.pinfold) from a layout
// directory.
func isArchive(out string) bool {
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		return false
	}
	return strings.HasSuffix(out, ".tar") || strings.HasSuffix(out, ".pinfold")
}

// write writes img to job.Out.
func write(img v1.Image, job *pack.Job, sig *pack.Signature, epoch time.Time, work, rootFile string) error {
	var opts []layout.Option
	if job.Tag != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": job.Tag}))
	}
	dir := filepath.Join(work, "layout")
	if !job.Archive && !isArchive(job.Out) {
		// Written aside, then renamed into place whole.
		p, err := layout.Write(dir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, opts...); err != nil {
			return err
		}
		if err := os.Remove(job.Out); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("%s: %w", job.Out, err) // a directory that is not empty
		}
		return os.Rename(dir, job.Out)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, opts...); err != nil {
		return err
	}
	// docker load reads manifest.json (docker 25 writes both forms too).
	// An app has none: readers take it as the OCI archive it is, named by
	// its manifest digest, which is what its signature names.
	if len(job.Meta) == 0 {
		if err := dockerManifest(img, job, dir); err != nil {
			return err
		}
	}

	if len(job.Meta) > 0 {
		if err := os.WriteFile(filepath.Join(dir, pack.MetaFile), job.Meta, 0o644); err != nil {
			return err
		}
	}
	if rootFile != "" {
		if err := os.Rename(rootFile, filepath.Join(dir, pack.RootFile)); err != nil {
			return err
		}
	}
	if sig != nil {
		b, _ := json.Marshal(sig)
		if err := os.WriteFile(filepath.Join(dir, pack.SignatureFile), b, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(work, "out.tar")
	if err := tarDir(dir, tmp, epoch); err != nil {
		return err
	}
	return os.Rename(tmp, job.Out)
}

// tarDir writes the files below dir as a plain tar, in a fixed order with
// fixed times, modes and owners.
func tarDir(dir, file string, epoch time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(names, compareParts)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: n, Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			hdr = &tar.Header{Name: n + "/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !st.IsDir() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(tw, src, make([]byte, 1<<20))
			src.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// sign makes the simple-signing signature of repo@digest.
func sign(s crypto.Signer, repo, digest string) (*pack.Signature, error) {
	payload := trust.Payload(repo, digest)
	b, err := trust.Sign(s, payload)
	if err != nil {
		return nil, err
	}
	return &pack.Signature{Payload: payload, Signature: b}, nil
}

// dockerManifest writes docker's manifest.json for img into dir.
func dockerManifest(img v1.Image, job *pack.Job, dir string) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	dm := []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: "blobs/sha256/" + m.Config.Digest.Hex}}
	if job.Tag != "" {
		tag := job.Tag
		if i := strings.LastIndexByte(tag, ':'); i < 0 || strings.Contains(tag[i:], "/") {
			tag += ":latest"
		}
		dm[0].RepoTags = []string{tag}
	}
	for _, l := range m.Layers {
		dm[0].Layers = append(dm[0].Layers, "blobs/sha256/"+l.Digest.Hex)
	}
	b, _ := json.Marshal(dm)
	return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
}

// stageError says which step failed, so that pinfold can say what to fix.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

func staged(stage string, err error) error { return &stageError{stage, err} }
