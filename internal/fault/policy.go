package fault

// Codes of policy decisions (pinfold.yaml, dispatch, host mode).
const (
	ConfigError     Code = "PF170" // pinfold.yaml does not parse or validate
	LockfileMissing Code = "PF172" // an install refused for want of a lockfile
	HookFailed      Code = "PF173" // a pre_run hook failed
	HostRefused     Code = "PF174" // a command not allowed to run on the host
	Preflight       Code = "PF175" // the host cannot run the chosen backend
	Unpinned        Code = "PF176" // a registry image by tag, and require_pinned_image
	Unverified      Code = "PF177" // verify_signature: the image's signature did not check out
)
