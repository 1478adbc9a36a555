package engine

import (
	"errors"
	"io/fs"
	"strings"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/oci"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/preflight"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/container"
	"github.com/pinfold/pinfold/sandbox/kubernetes"
	"github.com/pinfold/pinfold/sandbox/native"
)

// Classify turns an error of the engine, a runtime or a session into a
// coded user error (*fault.Error), so that every front end (the CLI, the
// HTTP API, a session's supervisor) gives the same failure the same code.
// p is the plan that failed, or nil before there is one: the errors whose
// message names the plan's values are then said without them.
func Classify(err error, p *plan.Plan) error {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	var pe *preflight.Error
	if errors.As(err, &pe) {
		return preflightFault(err)
	}
	var ee *sandbox.ExecError
	if errors.As(err, &ee) && p != nil {
		return execFault(ee, p, err)
	}
	var ue *sandbox.UnsupportedError
	if errors.As(err, &ue) {
		return Lacks(ue)
	}
	var ce *sandbox.CheckError
	if errors.As(err, &ce) {
		return fault.New(fault.Preflight, ce.What, errText(ce.Err), ce.Fix, err)
	}
	var se *sandbox.SpecError
	if errors.As(err, &se) && p != nil {
		return specFault(se, p, err)
	}
	if f := setupFault(err); f != nil {
		return f
	}
	return fault.New(fault.Internal, err.Error(), "", "please report this", err)
}

// execFault is a command that could not be executed: missing or not
// executable, in the sandbox or on the host.
func execFault(ee *sandbox.ExecError, p *plan.Plan, err error) error {
	where, fix := "in the sandbox", "give the full path, install it in the base, or mount its directory with --mount"
	if p.Mode == "host" {
		where, fix = "on the host", "check the command and the PATH the plan gives it (pinfold plan -- CMD)"
	}
	if errors.Is(ee.Err, fs.ErrNotExist) {
		e := fault.New(fault.NotFound, "command not found "+where+": "+ee.Name,
			"no executable "+ee.Name+" in the PATH it is given, or its interpreter is missing", fix, err)
		e.Exit = fault.ExitNotFound
		return e
	}
	e := fault.New(fault.CannotExec, "cannot execute "+ee.Name+" "+where,
		ee.Err.Error(), "check that it is an executable file for this machine", err)
	e.Exit = fault.ExitCannotExec
	return e
}

// specFault is a part of the plan's sandbox the runtime could not use,
// by the field it names.
func specFault(se *sandbox.SpecError, p *plan.Plan, err error) error {
	switch se.Field {
	case "workspace":
		if errors.Is(err, sandbox.ErrWorkspace) {
			return fault.New(fault.WorkspaceRefuse, se.Err.Error(),
				"exposing it would hand the sandbox the host's system or other users' files",
				"run pinfold from your project directory, or pass --workspace DIR or --access none", err)
		}
		return fault.New(fault.WorkspaceMissing, "workspace "+p.Sandbox.Workspace+" cannot be used",
			se.Err.Error(), "pass an existing directory with --workspace", err)
	case "base":
		return baseFault(se, &p.Sandbox.Base, err)
	case "workdir":
		return WorkdirFault(p.Command.Dir, "sandbox", se.Err.Error(), err)
	case "mount":
		return fault.New(fault.BadMount, "cannot mount: "+se.Err.Error(), "",
			"use --mount SRC:DST[:ro] with an existing SRC and an absolute DST outside /proc and /dev", err)
	case "limits":
		return fault.New(fault.Limits, "cannot enforce the requested limits", se.Err.Error(),
			"run pinfold as root, or inside a cgroup delegated to you; or drop --memory/--pids/--cpus", err)
	case "store":
		return fault.New(fault.Store, "cannot use pinfold's store", se.Err.Error(),
			"set PINFOLD_STORE to a writable directory", err)
	}
	return fault.New(fault.BadValue, se.Error(), "", "", err)
}

// baseFault is a base the runtime could not use: a tarball, an app, or
// an image file that holds several images or none it can run.
func baseFault(se *sandbox.SpecError, b *sandbox.Base, err error) error {
	if b.Kind == sandbox.BaseTar {
		return fault.New(fault.BaseImport, "cannot use tarball base "+b.Path,
			se.Err.Error(), "check the file is a tar archive (optionally gzip, bzip2, xz or zstd)", err)
	}
	if b.Kind == sandbox.BaseOCI && strings.HasSuffix(b.Path, ".pinfold") {
		return fault.New(fault.BadBase, "cannot run the app "+b.Path, se.Err.Error(),
			"the file is damaged or was changed since it was packed: get it again, or pack it again (pinfold pack app)", err)
	}
	var re *oci.RefError
	if errors.As(err, &re) && len(re.Names) > 0 {
		// The names listed are the choice; the Fix shows the first.
		first, _, _ := strings.Cut(re.Names[0], " (")
		return fault.New(fault.BadBase, "cannot use base "+string(b.Kind)+":"+b.Path,
			se.Err.Error(), "name one of the images the file lists: --base oci:"+b.Path+":NAME, e.g. --base oci:"+
				b.Path+":"+first, err)
	}
	return fault.New(fault.BadBase, "cannot use base "+string(b.Kind)+":"+b.Path,
		se.Err.Error(), "use --base host, debian-12, dir:PATH to a directory, tar:PATH or oci:PATH", err)
}

// setupFault is a sandbox that could not be built: the runtime, its
// engine or cluster, the network helper or the kernel refused. nil when
// err is none of those.
func setupFault(err error) error {
	if errors.Is(err, initp.ErrUnsupported) {
		return fault.New(fault.Unsupported, "the native sandbox is not built for this architecture", "",
			"use an amd64 machine", err)
	}
	if errors.Is(err, native.ErrIDMap) {
		return fault.New(fault.IDMap, "cannot show the workspace with its owner's ids",
			err.Error(), "run pinfold as the workspace's owner instead of root", err)
	}
	if errors.Is(err, container.ErrEngine) {
		return fault.New(fault.Setup, err.Error(), "the container engine refused or failed (its client prints its own message above; the API's is in this one)",
			"check that the engine runs containers (podman run / docker run), or use --backend native", err)
	}
	if errors.Is(err, kubernetes.ErrCluster) {
		return fault.New(fault.Setup, err.Error(), "the cluster refused or failed to run the pod",
			"check the pod's events (kubectl describe pod -n NAMESPACE NAME) and that its image is on the node or in a registry it pulls from", err)
	}
	if errors.Is(err, netpolicy.ErrNoHelper) {
		return fault.New(fault.Setup, "cannot serve the sandbox's network: "+err.Error(), "",
			"install pinfold-net beside pinfold (scripts/setup.sh does), or set PINFOLD_NET_HELPER to its path", err)
	}
	var pub *netpolicy.PublishError
	if errors.As(err, &pub) {
		// As pinfold session port says it: the helper is fine, the port
		// is not.
		return fault.New(fault.BadValue, "cannot listen on "+pub.Host, pub.Err.Error(), "choose another host port", err)
	}
	if errors.Is(err, netpolicy.ErrHelper) {
		return fault.New(fault.Setup, "cannot serve the sandbox's network: "+err.Error(), "",
			"check that the pinfold-net beside pinfold (or PINFOLD_NET_HELPER) is the one built with this pinfold (scripts/build.sh builds both)", err)
	}
	if errors.Is(err, native.ErrAppMount) {
		return fault.New(fault.Setup, "cannot build the sandbox: "+err.Error(),
			"the app's root image is mounted through squashfuse inside the sandbox, and that step failed",
			"run it unpacked instead (PINFOLD_APP_MOUNT=0 pinfold run APP), and see pinfold doctor's app.mount", err)
	}
	var setup *initp.SetupError
	if errors.As(err, &setup) {
		return fault.New(fault.Setup, "cannot build the sandbox: "+err.Error(),
			"the kernel refused a step; user namespaces may be disabled or restricted",
			"check that sysctl user.max_user_namespaces is above 0 (and kernel.unprivileged_userns_clone=1 "+
				"or the AppArmor userns restriction off, where the distribution has them)", err)
	}
	return nil
}

// WorkdirFault says that a command's working directory dir is missing
// in where ("sandbox" for run, "session" for exec).
func WorkdirFault(dir, where, why string, err error) error {
	return fault.New(fault.BadValue, "the working directory "+dir+" does not exist in the "+where,
		why, "pass --workdir with a directory the "+where+" has (the workspace, /tmp...)", err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// preflightFault turns a failed native preflight (*preflight.Error)
// into a coded error for the user: PF130 when only the requested limits
// are the problem (as when the sandbox itself refuses them), PF175 when
// the sandbox itself cannot be built here. Other errors pass through.
func preflightFault(err error) error {
	var pe *preflight.Error
	if !errors.As(err, &pe) {
		return err
	}
	code := fault.Limits
	var what, why, fix []string
	for _, c := range pe.Checks {
		if !strings.HasPrefix(c.ID, "cgroup.") {
			code = fault.Preflight
		}
		what = append(what, c.Title)
		why = append(why, c.Detail)
		if c.Fix != "" {
			fix = append(fix, c.Fix)
		}
	}
	fix = append(fix, "pinfold doctor shows more")
	what0 := "this host cannot run the sandbox: " + strings.Join(what, ", ")
	if code == fault.Limits {
		what0 = "cannot enforce the requested limits"
	}
	return fault.New(code, what0, strings.Join(why, "; "), strings.Join(fix, "; "), err)
}
