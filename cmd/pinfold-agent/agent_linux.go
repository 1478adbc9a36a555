package main

import "github.com/pinfold/pinfold/internal/agent"

// serve runs the agent or its bridge, as pinfold's hidden commands do;
// false: args name neither.
func serve(args []string) (int, bool) {
	if len(args) > 0 {
		switch args[0] {
		case agent.AgentCommand:
			return agent.AgentMain(args[1:]), true
		case agent.BridgeCommand:
			return agent.BridgeMain(args[1:]), true
		}
	}
	return 2, false
}
