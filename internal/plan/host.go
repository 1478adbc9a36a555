package plan

import (
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
)

// hostBlockedDefault are variables that make a program load or run code
// chosen by whoever set them; backend host never passes them.
var hostBlockedDefault = [...]string{
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG*", "LD_PROFILE*", "GCONV_PATH", "GLIBC_TUNABLES",
	"NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5OPT", "PERL5LIB",
	"PERLLIB", "RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "PROMPT_COMMAND", "JAVA_TOOL_OPTIONS",
	"_JAVA_OPTIONS", "DYLD_*", "GIT_SSH_COMMAND", "GIT_EXEC_PATH",
}

// checkHostAllowed refuses a host-mode command that no allow glob matches.
func checkHostAllowed(p *Plan) error {
	line := strings.Join(p.Command.Args, " ")
	for _, g := range p.HostAllow {
		if globMatch(g, line) {
			p.Audit.Rule = strings.TrimSpace(p.Audit.Rule + "; host allow " + strconv.Quote(g))
			return nil
		}
	}
	why := "backend host runs commands unsandboxed, so only those matching host.allow may run"
	if len(p.HostAllow) == 0 {
		why += "; none is allowed (host.allow is empty)"
	} else {
		why += "; allowed: " + strings.Join(p.HostAllow, ", ")
	}
	return fault.New(fault.HostRefused, "refusing to run "+strconv.Quote(line)+" on the host", why+
		" (backend from "+p.Sources["backend"]+")",
		"add a glob matching it to host.allow, or run it in a sandbox (backend: native)", nil)
}
