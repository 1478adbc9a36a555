package fault

// Codes of changesets.
const (
	NoChangeset Code = "PF180" // no changeset matches, or none is open for the workspace
	Conflict    Code = "PF181" // originals changed since the run; apply refused
	ApplyFailed Code = "PF182" // an apply stopped (disk full, unsafe entry...)
	Busy        Code = "PF183" // another pinfold holds the changeset
	DiskCap     Code = "PF184" // the --disk volume cannot be made (not root, no loop devices, no room)
	NoPath      Code = "PF185" // PATHS given to diff or apply match nothing in the changeset
	// PolicyChange: the changeset adds, changes or removes a pinfold.yaml
	// and the apply was not given --policy.
	PolicyChange Code = "PF186"
	// EarlierBoot: a run wrote the changeset during an earlier boot of
	// the host, unsynced; apply wants --force, a rerun into it is refused.
	EarlierBoot Code = "PF188"
)
