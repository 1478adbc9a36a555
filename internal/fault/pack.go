package fault

// Codes of pinfold pack and of running packed apps.
const (
	PackDirty  Code = "PF195" // the workspace has uncommitted changes or open changesets
	PackBase   Code = "PF196" // the sandbox's base cannot be packed (host)
	PackFailed Code = "PF197" // writing, pushing or signing the image failed
	BadApp     Code = "PF198" // an app file that is not one, or whose signature does not check out
	PackSecret Code = "PF178" // a file a secret names is committed in the workspace pack would pack
	AppMount   Code = "PF179" // a mount of an app's run would cover the app's own files
)
