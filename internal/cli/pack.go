package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/fault"
)

// packOptions are the flags of pack image and pack app.
type packOptions struct {
	run        runOptions
	tag, out   string
	push       string
	allowDirty bool
	entrypoint []string
	signKey    string
}

func packFlags(fs *flagSet, name string, o *packOptions) {
	runFlags(fs, name, &o.run)
	// Accepted, so that a run's flags can be reused as they are, but they
	// change nothing in an image: not shown in the help.
	for _, f := range []string{"backend", "capture", "changeset", "mount", "user", "hostname", "network", "allow", "deny",
		"host-loopback", "publish", "dns", "cap-add", "memory", "pids", "cpus", "timeout", "tmp-size", "disk", "tty", "interactive"} {
		fs.fs.MarkHidden(f)
	}
	fs.String(&o.tag, "tag", 0, "NAME[:TAG]", "name the image in what --out holds (and docker/podman load)")
	fs.String(&o.out, "out", 'o', "PATH", "write the image: a DIR (an OCI layout) or FILE.tar (an OCI archive docker load reads too)")
	if name == "pack image" {
		fs.String(&o.push, "push", 0, "REF", "push the image to a registry (HOST[:PORT]/REPO[:TAG])")
	}
	fs.Bool(&o.allowDirty, "allow-dirty", 0, "pack a workspace with uncommitted changes or open changesets")
	fs.List(&o.entrypoint, "entrypoint", 0, "ARG", "the image's entrypoint, one argument per flag (repeatable)")
	fs.String(&o.signKey, "sign-key", 0, "FILE", "sign with this PEM private key (a cosign signature; see docs/pack.md)")
}

func packCommand() command {
	return command{name: "pack", summary: "pack the sandbox into an OCI image or a single-file app", use: "pack",
		long: `Packs the sandbox a run with the same flags would get (its base with its
capabilities, and the workspace at its path) into an OCI image, byte for
byte the same for the same inputs. See docs/pack.md.`,
		sub: []command{
			{name: "image", summary: "pack the sandbox into an OCI image", use: "image [flags] [-- COMMAND [ARGS...]]",
				long: `Packs the sandbox into an OCI image: one layer for the base (with its
capabilities), one for the workspace at its path (the files git tracks
or would track, never a file a secret names), the environment set by
pinfold.yaml and --env, the working directory, and COMMAND as the image's
cmd. The workspace's file times are set to SOURCE_DATE_EPOCH, else its
last commit's (the base's clamped to it); owners are the sandbox's, never
the host's; so the same commit gives the same digest from any checkout.
A workspace with uncommitted changes or open changesets is refused
unless --allow-dirty, and one that commits a secret file always is. Takes every flag of 'pinfold run' that chooses the
sandbox (--base, --workspace, --env, -w...).`,
				setup: func(fs *flagSet) runner {
					var o packOptions
					packFlags(fs, "pack image", &o)
					return func(ctx context.Context, io *IO, args []string) int {
						p, err := packMain(ctx, io, &o, args, false)
						if err != nil {
							return fail(io, err)
						}
						return printPacked(io, p, o.run.json)
					}
				}},
			{name: "app", summary: "pack the sandbox into a single-file app", use: "app --out APP.pinfold [flags] [-- COMMAND [ARGS...]]",
				long: `Packs the sandbox as 'pack image' does into one file, APP.pinfold: an OCI
archive of the image with pinfold's metadata (and signature, with
--sign-key). 'pinfold run APP.pinfold -- ARGS' runs it anywhere pinfold
is, without the project or a container engine; 'pinfold app inspect'
shows what it holds.`,
				setup: func(fs *flagSet) runner {
					var o packOptions
					packFlags(fs, "pack app", &o)
					return func(ctx context.Context, io *IO, args []string) int {
						p, err := packMain(ctx, io, &o, args, true)
						if err != nil {
							return fail(io, err)
						}
						return printPacked(io, p, o.run.json)
					}
				}},
		},
	}
}

// packMain resolves the plan of the flags and packs it.
func packMain(ctx context.Context, io *IO, o *packOptions, args []string, app bool) (*engine.Packed, error) {
	if app && o.out == "" {
		return nil, usage("pinfold pack app needs --out APP.pinfold", "like --out hello.pinfold")
	}
	if o.out == "" && o.push == "" {
		return nil, usage("pinfold pack image needs --out PATH or --push REF", "like --out app.tar or --out ./app-oci/")
	}
	switch lower := strings.ToLower(o.out); {
	case app && !strings.HasSuffix(o.out, ".pinfold"): // as pinfold run tells an app
		// pinfold run tells an app from a command by that name.
		return nil, usage("pinfold pack app --out needs a name ending in .pinfold, not "+o.out, "like --out "+strings.TrimSuffix(o.out, filepath.Ext(o.out))+".pinfold")
	case !app && (strings.HasSuffix(lower, ".gz") || strings.HasSuffix(lower, ".tgz") || strings.HasSuffix(lower, ".zst") ||
		strings.HasSuffix(lower, ".xz") || strings.HasSuffix(lower, ".zip")):
		return nil, usage("pinfold pack image writes an OCI layout directory or an uncompressed .tar archive, not "+o.out,
			"like --out app.tar (its layers are compressed already) or --out ./app-oci/")
	}
	rest := args
	if len(rest) == 0 {
		rest = []string{"true"}
	}
	eng := engineFor(io)
	p, err := resolve(ctx, eng, &o.run, rest)
	if err != nil {
		return nil, engine.Classify(err, nil)
	}
	out := o.out
	if out != "" {
		if out, err = filepath.Abs(out); err != nil {
			return nil, err
		}
	}
	return eng.Pack(ctx, p, engine.PackOptions{Out: out, Tag: o.tag, Push: o.push, AllowDirty: o.allowDirty,
		Entrypoint: o.entrypoint, Cmd: args, App: app, SignKey: o.signKey})
}

func printPacked(io *IO, p *engine.Packed, asJSON bool) int {
	if asJSON {
		json.NewEncoder(io.Stdout).Encode(struct {
			Digest       string   `json:"digest"`
			ConfigDigest string   `json:"config_digest"`
			Layers       []string `json:"layers"`
			Size         int64    `json:"size"`
			Pushed       string   `json:"pushed,omitempty"`
			Signature    string   `json:"signature,omitempty"`
			SandboxID    string   `json:"sandbox_id,omitempty"`
			Epoch        int64    `json:"epoch"`
		}{p.Digest, p.ConfigDigest, p.Layers, p.Size, p.Pushed, p.Signature, p.System.SandboxID, p.Epoch})
		return 0
	}
	fmt.Fprintln(io.Stdout, p.Digest)
	if p.System.SandboxID != "" {
		fmt.Fprintf(io.Stderr, "pinfold: sandbox id %s\n", p.System.SandboxID)
	}
	if p.Pushed != "" {
		fmt.Fprintf(io.Stderr, "pinfold: pushed %s\n", p.Pushed)
	}
	if p.Signature != "" {
		fmt.Fprintf(io.Stderr, "pinfold: signed (%s)\n", p.Signature)
	}
	return 0
}

// usage is a usage error with a fix.
func usage(what, fix string) error {
	e := fault.New(fault.Usage, what, "", fix, nil)
	e.Exit = fault.ExitUsage
	return e
}
