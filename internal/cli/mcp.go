package cli

import "context"

func mcpCommand() command {
	return command{name: "mcp", summary: "serve pinfold's tools to an agent over MCP (stdin and stdout)", use: "mcp [--workspace DIR]",
		long: `Serves the Model Context Protocol on standard input and output, for
coding agents (Claude Code, Claude Desktop, VS Code, Cursor...): tools to
run a command in a sandbox under the workspace's pinfold.yaml, start, use
and stop sessions, read, write and list their files, and see the
changeset's diff. Every write is kept as a changeset: the agent applies
or discards it only where pinfold.yaml says mcp: {apply: true}; otherwise
a person does, with pinfold apply. The same tools are served over HTTP at
pinfold serve's /mcp, behind its tokens. See docs/mcp.md.`,
		setup: func(fs *flagSet) runner {
			var ws string
			fs.String(&ws, "workspace", 0, "DIR", "the workspace sessions start in (default: the current directory)")
			return func(ctx context.Context, io *IO, args []string) int {
				if len(args) > 0 {
					return fail(io, fs.errorf("pinfold mcp takes no arguments"))
				}
				a := []string{"mcp", "--version", Version}
				if ws != "" {
					a = append(a, "--workspace", ws)
				}
				return execAPI(io, a...)
			}
		}}
}
