package config

// The keys each mapping of pinfold.yaml accepts, sorted. They are arrays
// of constants, laid out by the linker: no work at start-up. The decoder
// names them in its errors, and the schema test checks that
// config/pinfold.schema.json lists exactly these.

var topKeys = [...]string{
	"access", "allow", "auto", "backend", "base", "caches", "cap_add", "capabilities", "capture", "deny",
	"dispatch", "dns", "env", "host", "host_loopback", "hostname", "limits", "lockfile_files", "mcp", "mounts", "network", "pack", "ports",
	"pre_run", "profiles", "require_lockfile", "require_pinned_image", "role", "secrets", "trusted_keys", "user",
	"verify_signature", "version", "workdir", "workspace",
}

var profileKeys = [...]string{
	"access", "allow", "auto", "backend", "base", "caches", "cap_add", "capabilities", "capture", "deny", "dns", "env", "host",
	"host_loopback", "hostname", "limits", "lockfile_files", "mounts", "network", "ports", "pre_run",
	"require_lockfile", "require_pinned_image", "role", "secrets", "trusted_keys", "user", "verify_signature", "workdir",
}

var packKeys = [...]string{"cmd", "entrypoint", "tag"}

var mcpKeys = [...]string{"apply"}

var envKeys = [...]string{"deny", "pass", "set"}

var limitsKeys = [...]string{"cpus", "disk", "memory", "pids", "timeout", "tmp_size"}

var hostKeys = [...]string{"allow", "block_env"}

var cacheKeys = [...]string{"name", "path"}

var secretKeys = [...]string{"env", "file", "name", "path"}

var mountKeys = [...]string{"readonly", "source", "target"}

var ruleKeys = [...]string{"args", "command", "match", "profile", "regex"}

// capNames are the Linux capabilities a profile may grant, as
// sandbox/caps.go knows them (which keeps its list unexported).
var capNames = [...]string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// Values of the settings that take one of a few words.
var (
	backendValues = [...]string{"native", "gvisor", "podman", "docker", "kubernetes", "host", "auto"}
	accessValues  = [...]string{"changeset", "rw", "ro", "none"}
	networkValues = [...]string{"none", "host", "outbound", "allow"}
	roleValues    = [...]string{"install", "run", "build"}
)
