// Package config reads pinfold.yaml: the user's policy, written once,
// that pinfold applies to every command it runs. It parses a strict subset
// of YAML with positions, so every error points at file:line:col, and
// refuses unknown keys (a typo in a security policy must not pass
// silently). It only describes what the user wrote; internal/plan decides
// what a command gets.
package config

// FileName is the name pinfold looks for, walking up from the current
// directory.
const FileName = "pinfold.yaml"

// Version is the only config format version this pinfold reads.
const Version = 1

// Pos is a position in the config file (1-based).
type Pos struct {
	Line, Col int
}

// File is a parsed pinfold.yaml.
type File struct {
	Path    string // absolute path of the file
	Version int
	// Settings at the top level apply to every command; a profile chosen
	// by dispatch overrides them field by field.
	Settings Settings
	Profiles []Profile // in file order
	Dispatch []Rule    // in file order; the first match wins
	// Pack is how pinfold pack's images run (top level only).
	Pack *Pack
	// MCP is what pinfold mcp's agents may do (top level only).
	MCP *MCP
}

// MCP is the mcp: section. Apply offers the apply and discard tools:
// by default a person, not the agent, decides what reaches the workspace.
type MCP struct {
	Pos   Pos
	Apply bool
}

// Pack is the pack: section: the entrypoint and cmd of the images
// pinfold pack makes, and their tag, where the command line gives none.
type Pack struct {
	Pos        Pos
	Entrypoint []string
	Cmd        []string
	Tag        string
}

// Profile is a named set of settings.
type Profile struct {
	Name     string
	Pos      Pos
	Settings Settings
}

// Rule maps a command line to a profile. Exactly one of Match, Command or
// Regex is set.
type Rule struct {
	Pos Pos
	// Match is a glob on the command line joined with spaces ("npm install*").
	Match string
	// Command is a command name (argv[0] without its directory), with
	// Args globs matched against argv[1:] in order; a trailing "*" glob
	// also matches no argument. Empty Args match any arguments.
	Command string
	Args    []string
	// Regex is a regular expression (RE2) on the joined command line.
	Regex   string
	Profile string

	re *lazyRegex // Regex, compiled on first use (see CompiledRegex)
}

// Settings are the policy knobs; every `pinfold run` flag has one. A nil
// pointer or nil slice means "not set here". Relative host paths are
// relative to the directory holding the file; "~/" means the invoking
// user's home.
type Settings struct {
	Backend   *string // native | host | auto
	Base      *string // host | dir:PATH | tar:PATH
	Access    *string // changeset | rw | ro | none
	Workspace *string // the workspace; default: the file's directory
	Workdir   *string // working directory inside
	Network   *string // none | host | outbound | allow
	User      *string // root, or "" for the invoking user
	Hostname  *string

	// Network policy (with outbound and allow): allow and deny lists of
	// names, wildcards and CIDRs, the host's loopback at 10.0.2.2,
	// published ports ([HOSTADDR:]HOSTPORT:PORT), upstream resolvers.
	Allow, Deny  []string
	HostLoopback *bool
	Ports, DNS   []string

	// Image trust: refuse registry images named by tag; check a cosign
	// signature of the image against TrustedKeys (PEM public keys, paths
	// relative to the file).
	RequirePinnedImage *bool
	VerifySignature    *bool
	TrustedKeys        []string

	Mounts []Mount
	// Capture lists host directories besides the workspace whose writes are
	// kept in the changeset instead of reaching them.
	Capture []string
	CapAdd  []string // Linux capabilities granted inside (NET_RAW...)
	// Capabilities are what the sandbox's system must provide (postgres,
	// imagecodecs...): packages added to the base. Auto lets pinfold infer
	// more from lockfiles and shared objects.
	Capabilities []string
	Auto         *bool
	Env          *EnvPolicy
	Caches       []Cache
	Secrets      []Secret
	Limits       *Limits

	// Install-style policy.
	Role            *string  // install | run | build
	LockfileFiles   []string // lockfiles that must exist for an install (workspace-relative)
	RequireLockfile *bool    // refuse an install without one of LockfileFiles
	PreRun          []Hook   // host-side commands run before the command; a failure aborts

	// Host mode (backend: host).
	Host *HostPolicy

	// Pos of each key set, by key name ("network", "limits.memory"...), for
	// provenance and errors.
	Pos map[string]Pos
}

// Mount binds a host path into the sandbox. In YAML either a string
// "SRC:DST[:ro|rw]" or a mapping {source, target, readonly}.
type Mount struct {
	Pos      Pos
	Source   string
	Target   string
	ReadOnly bool
}

// EnvPolicy decides the command's environment. Names in Pass and Deny are
// globs ("LC_*"). Deny wins over Pass and over --env NAME.
type EnvPolicy struct {
	Pos  Pos
	Pass []string          // host variables to pass when set
	Set  map[string]string // variables to set
	Deny []string          // never passed or set from the host
	// SetOrder is the order of Set's keys in the file.
	SetOrder []string
}

// Cache is a named directory kept across runs in pinfold's store (per
// workspace) and mounted read-write at Path inside.
type Cache struct {
	Pos  Pos
	Name string
	Path string
}

// Secret is a host file mounted read-only at Path inside; its contents
// never appear in printed plans, logs or changesets. Env, when set, names
// a variable that is set to Path.
type Secret struct {
	Pos  Pos
	Name string
	File string // host path
	Path string // inside; default /run/secrets/<name>
	Env  string
}

// Limits bound a command. Strings use the flag syntax ("512m", "10m").
type Limits struct {
	Pos     Pos
	Memory  *string
	Pids    *int64
	CPUs    *float64
	Timeout *string
	TmpSize *string
	Disk    *string // a size or "none"
}

// Hook is a host-side command, run before the command in the workspace
// with the invoking user's environment. YAML: a string (run with /bin/sh
// -c) or a list of arguments.
type Hook struct {
	Pos   Pos
	Shell string   // set for the string form
	Args  []string // set for the list form
}

// HostPolicy restricts backend: host.
type HostPolicy struct {
	Pos Pos
	// Allow lists the command lines that may run on the host: globs on the
	// joined command line. Empty means nothing may.
	Allow []string
	// BlockEnv lists more variables (globs) stripped from the environment,
	// beyond the built-in list (LD_PRELOAD, LD_LIBRARY_PATH, NODE_OPTIONS...).
	BlockEnv []string
}
