package fault

// Codes of pinfold pack and of running packed apps.
const (
	PackDirty  Code = "PF190" // the workspace has uncommitted changes or open changesets
	PackBase   Code = "PF191" // the sandbox's base cannot be packed (host)
	PackFailed Code = "PF192" // writing, pushing or signing the image failed
	BadApp     Code = "PF193" // an app file that is not one, or whose signature does not check out
)
