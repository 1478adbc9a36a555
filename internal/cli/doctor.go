package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/doctor"
)

const doctorUsage = `Usage: pinfold doctor [flags]

Checks that this host can run pinfold's sandboxes: user namespaces,
overlayfs, seccomp, cgroups, Landlock, the store, bases, and podman and
docker. Prints one line per check, then how to fix what did not pass.
Exits 0 when no check fails (warnings do not fail), 1 when one does.

Flags:
`

// doctorJSON is the --json output: the report, and with --fix what was
// applied before the checks ran again.
type doctorJSON struct {
	*doctor.Report
	Fixes []doctorFix `json:"fixes,omitempty"`
}

type doctorFix struct {
	ID     string `json:"id"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

func doctorCommand() command {
	return command{name: "doctor", summary: "check this host can run sandboxes", use: "doctor [flags]",
		long: helpText(doctorUsage),
		setup: func(fs *flagSet) runner {
			var asJSON, fix, quick bool
			var workspace string
			fs.Bool(&asJSON, "json", 0, "print the report as JSON")
			fs.Bool(&fix, "fix", 0, "apply the fixes pinfold can apply, then check again")
			fs.Bool(&quick, "quick", 0, "skip the podman and docker checks")
			fs.String(&workspace, "workspace", 0, "PATH", "also check idmapped mounts on this workspace")
			return func(ctx context.Context, io *IO, rest []string) int {
				if len(rest) > 0 {
					return fail(io, fs.errorf("pinfold doctor takes no arguments"))
				}
				if workspace != "" {
					var err error
					if workspace, err = filepath.Abs(workspace); err != nil {
						return fail(io, err)
					}
				}
				opt := doctor.Options{Slow: !quick, Workspace: workspace}
				run := func() *doctor.Report {
					r := doctor.Run(ctx, opt)
					if !quick {
						r.Checks = append(r.Checks, backendChecks(ctx, io)...)
					}
					return r
				}
				r := run()
				var fixes []doctorFix
				if fix {
					for _, c := range r.Checks {
						if c.Status == doctor.Pass || !c.Fixable {
							continue
						}
						msg, err := doctor.Apply(ctx, c)
						f := doctorFix{ID: c.ID, Result: msg}
						if err != nil {
							f.Error = err.Error()
						}
						fixes = append(fixes, f)
						if !asJSON {
							if err != nil {
								fmt.Fprintf(io.Stdout, "could not fix %s: %v\n", c.Title, err)
							} else {
								fmt.Fprintf(io.Stdout, "fixed %s: %s\n", c.Title, msg)
							}
						}
					}
					if !asJSON {
						if len(fixes) == 0 {
							fmt.Fprintln(io.Stdout, "nothing pinfold can fix by itself")
						}
						fmt.Fprintln(io.Stdout)
					}
					if len(fixes) > 0 {
						r = run()
					}
				}
				if asJSON {
					b, err := json.MarshalIndent(doctorJSON{Report: r, Fixes: fixes}, "", "  ")
					if err != nil {
						return fail(io, err)
					}
					io.Stdout.Write(append(b, '\n'))
				} else {
					printReport(io.Stdout, r, fix)
				}
				if r.Failed() {
					return 1
				}
				return 0
			}
		}}
}

// printReport writes the table of checks, then the fixes.
// backendChecks are the probes backend auto makes (engine.Probe), one
// check per backend in the order auto tries them.
func backendChecks(ctx context.Context, io *IO) []doctor.Check {
	var cs []doctor.Check
	for _, pr := range engineFor(io).Probe(ctx, nil) {
		c := doctor.Check{ID: "backend." + pr.Backend, Title: "backend " + pr.Backend, Status: doctor.Pass,
			Detail: "can run a plain sandbox; backend auto tries it in this order"}
		if !pr.Usable {
			c.Status, c.Detail, c.Fix = doctor.Warn, pr.Problem, pr.Fix
		}
		cs = append(cs, c)
	}
	if pr, ok := engineFor(io).ProbeKubernetes(ctx); ok {
		c := doctor.Check{ID: "backend.kubernetes", Title: "backend kubernetes", Status: doctor.Pass,
			Detail: "the cluster answers (--backend kubernetes; backend auto never picks it)"}
		if !pr.Usable {
			c.Status, c.Detail, c.Fix = doctor.Warn, pr.Problem, pr.Fix
		}
		cs = append(cs, c)
	}
	return cs
}

func printReport(w io.Writer, r *doctor.Report, fixed bool) {
	who := "root"
	if r.UID != 0 {
		who = "uid " + strconv.Itoa(r.UID)
	}
	fmt.Fprintf(w, "pinfold doctor: Linux %s, running as %s\n\n", r.Kernel, who)
	width := 0
	for _, c := range r.Checks {
		width = max(width, len(c.Title))
	}
	var fails, warns int
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", strings.ToUpper(string(c.Status)), width, c.Title, c.Detail)
		switch c.Status {
		case doctor.Fail:
			fails++
		case doctor.Warn:
			warns++
		}
	}
	if fails+warns > 0 {
		fmt.Fprint(w, "\nTo fix:\n")
		for _, c := range r.Checks {
			if c.Status == doctor.Pass || c.Fix == "" {
				continue
			}
			fmt.Fprintf(w, "  %s (%s): %s", c.Title, c.ID, c.Fix)
			if c.Fixable && !fixed {
				fmt.Fprint(w, " [pinfold doctor --fix does this]")
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	switch {
	case fails > 0:
		fmt.Fprintf(w, "%s failed, %s.\n", plural(fails, "check"), plural(warns, "warning"))
	case warns > 0:
		fmt.Fprintf(w, "No check failed; %s.\n", plural(warns, "warning"))
	default:
		fmt.Fprintln(w, "All checks passed.")
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
