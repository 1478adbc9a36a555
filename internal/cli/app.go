package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/pinfold/pinfold/internal/appmount"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/trust"
)

func appCommand() command {
	return command{name: "app", summary: "inspect single-file apps (pinfold pack app)", use: "app",
		sub: []command{
			{name: "inspect", summary: "show what an app file holds", use: "inspect APP.pinfold [--verify-key FILE] [--json]", interspersed: true,
				long: `Shows what an app file holds: its image digest, sandbox id and base,
the command, environment and working directory it runs with, its layers,
its root image (the squashfs a run mounts, when it has one), and whether
it is signed (and, with --verify-key, by a trusted key). Nothing is
unpacked.`,
				setup: func(fs *flagSet) runner {
					var asJSON bool
					var keys []string
					fs.Bool(&asJSON, "json", 0, "print JSON")
					fs.List(&keys, "verify-key", 0, "FILE", "check the app's signature against this PEM public key (repeatable)")
					return func(ctx context.Context, io *IO, args []string) int {
						if len(args) != 1 {
							return fail(io, usage("pinfold app inspect takes one app file", "pinfold app inspect APP.pinfold"))
						}
						return appInspect(io, args[0], keys, asJSON)
					}
				}},
		}}
}

func appInspect(io *IO, file string, keyPaths []string, asJSON bool) int {
	a, err := readApp(file)
	if err != nil {
		return fail(io, err)
	}
	verified, why := "", ""
	if len(keyPaths) > 0 {
		keys, err := trust.LoadKeys(keyPaths)
		if err != nil {
			return fail(io, fault.New(fault.BadValue, err.Error(), "", "give PEM public keys", err))
		}
		if verified, err = trust.VerifyArchive(a, keys); err != nil {
			why = err.Error()
		}
	}
	c := a.Config.Config
	if asJSON {
		var size int64
		for _, l := range a.Manifest.Layers {
			size += l.Size
		}
		json.NewEncoder(io.Stdout).Encode(struct {
			File       string            `json:"file"`
			Format     string            `json:"format"`
			Digest     string            `json:"digest"`
			SandboxID  string            `json:"sandbox_id,omitempty"`
			BaseID     string            `json:"base_id,omitempty"`
			Tag        string            `json:"tag,omitempty"`
			Created    string            `json:"created"`
			Entrypoint []string          `json:"entrypoint,omitempty"`
			Cmd        []string          `json:"cmd,omitempty"`
			Env        []string          `json:"env,omitempty"`
			WorkingDir string            `json:"working_dir,omitempty"`
			Layers     []pack.Descriptor `json:"layers"`
			LayerBytes int64             `json:"layer_bytes"`
			Signed     bool              `json:"signed"`
			VerifiedBy string            `json:"verified_by,omitempty"`
			Unverified string            `json:"unverified,omitempty"`
			Labels     map[string]string `json:"labels,omitempty"`
			Root       *pack.RootImage   `json:"root,omitempty"`
		}{a.Path, a.Meta.Format, a.Digest, a.Meta.SandboxID, a.Meta.BaseID, a.Meta.Tag, a.Config.Created,
			c.Entrypoint, c.Cmd, c.Env, c.WorkingDir, a.Manifest.Layers, size, a.Signature != nil, verified, why, c.Labels, a.Meta.Root})
	} else {
		w := io.Stdout
		fmt.Fprintf(w, "app:        %s (%s)\n", a.Path, a.Meta.Format)
		fmt.Fprintf(w, "image:      %s\n", a.Digest)
		if a.Meta.Tag != "" {
			fmt.Fprintf(w, "tag:        %s\n", a.Meta.Tag)
		}
		fmt.Fprintf(w, "sandbox id: %s\n", a.Meta.SandboxID)
		fmt.Fprintf(w, "base id:    %s\n", a.Meta.BaseID)
		fmt.Fprintf(w, "created:    %s\n", a.Config.Created)
		fmt.Fprintf(w, "command:    %s\n", strings.Join(append(slices.Clone(c.Entrypoint), c.Cmd...), " "))
		fmt.Fprintf(w, "workdir:    %s\n", c.WorkingDir)
		for _, e := range c.Env {
			fmt.Fprintf(w, "env:        %s\n", e)
		}
		for i, l := range a.Manifest.Layers {
			fmt.Fprintf(w, "layer %d:    %s %d bytes\n", i, l.Digest, l.Size)
		}
		if r := a.Meta.Root; r != nil {
			fmt.Fprintf(w, "root image: %s %d bytes (squashfs: runs mount it where they can)\n", r.Digest, r.Size)
		} else {
			fmt.Fprintln(w, "root image: none (runs unpack the layers)")
		}
		switch {
		case a.Signature == nil:
			fmt.Fprintln(w, "signature:  none")
		case verified != "":
			fmt.Fprintf(w, "signature:  verified with %s\n", verified)
		case why != "":
			fmt.Fprintf(w, "signature:  NOT verified: %s\n", why)
		default:
			fmt.Fprintln(w, "signature:  present (give --verify-key to check it)")
		}
	}
	if why != "" {
		return fault.ExitFailed
	}
	return 0
}

// readApp reads an app file, with coded errors.
func readApp(file string) (*pack.Archive, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	a, err := pack.ReadArchive(abs)
	if err != nil {
		return nil, fault.New(fault.BadApp, "cannot read the app "+file+": "+err.Error(), "", "make it with pinfold pack app --out "+filepath.Base(file), err)
	}
	if a.Meta == nil || a.Meta.Format != pack.AppFormat {
		return nil, fault.New(fault.BadApp, file+" is not a pinfold app ("+pack.AppFormat+")", "it has no "+pack.MetaFile+" of this format",
			"run an image file as a base instead: pinfold run --base oci:"+file+" -- COMMAND", nil)
	}
	return a, nil
}

// appRun turns `run APP.pinfold [--] [ARGS...]` into the run of the app's
// image: its file as an oci: base, its entrypoint and cmd (ARGS replace
// the cmd), environment and working directory, and no workspace unless
// flags ask for one. Other flags keep their meaning (--backend podman
// runs it in podman).
func appRun(o *runOptions, rest []string) ([]string, error) {
	if len(rest) == 0 || !pack.IsApp(rest[0]) {
		return rest, nil
	}
	a, err := readApp(rest[0])
	if err != nil {
		return nil, err
	}
	o.app = a
	args := rest[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	c := a.Config.Config
	if len(args) == 0 {
		args = c.Cmd
	}
	args = append(slices.Clone(c.Entrypoint), args...)
	if len(args) == 0 {
		return nil, fault.New(fault.BadApp, "the app "+rest[0]+" has no command", "it was packed without one",
			"give one: pinfold run "+rest[0]+" -- COMMAND", nil)
	}
	f := &o.flags
	if f.Base != "" {
		return nil, usage("--base cannot be given with an app: the app is the base", "drop --base")
	}
	f.Base = "oci:" + a.Path
	o.appSet = append(o.appSet[:0], "base")
	if f.Workdir == "" && c.WorkingDir != "" {
		f.Workdir = c.WorkingDir
		o.appSet = append(o.appSet, "workdir")
	}
	if f.Access == "" && f.Workspace == "" {
		f.Access = "none"
		o.appSet = append(o.appSet, "access")
	}
	f.Env = append(slices.Clone(c.Env), f.Env...)
	return args, nil
}

// unpackAppLater starts "pinfold __app-unpack APP", detached, once a
// native run of an app started from its mounted root image: the next runs
// start from the store, which is faster warm (see docs/pack.md). Called
// twice for a run that hands off (before and, if it did not, after);
// the store check makes the second a no-op once the first started.
func unpackAppLater(o *runOptions, p *plan.Plan) {
	if o.app == nil || o.unpackStarted || p.Backend != "native" || !appmount.UnpackLater() ||
		appmount.Unpacked("", o.app.Path) {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.Command(exe, "__app-unpack", o.app.Path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		o.unpackStarted = true
		cmd.Process.Release()
	}
}

// appUnpackCommand is what unpackAppLater starts, at the lowest priority.
func appUnpackCommand() command {
	return command{name: "__app-unpack", use: "__app-unpack APP", hidden: true,
		summary: "unpack an app into the store after its first mounted run (pinfold's own use)",
		setup: func(fs *flagSet) runner {
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) != 1 || !filepath.IsAbs(args[0]) {
					return fail(io, usageError(errors.New("usage: pinfold __app-unpack APP")))
				}
				syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19)
				if err := appmount.Unpack(ctx, "", args[0]); err != nil {
					fmt.Fprintln(io.Stderr, "pinfold: unpacking", args[0]+":", err)
					return 1
				}
				return 0
			}
		}}
}
