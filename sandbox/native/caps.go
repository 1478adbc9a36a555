package native

import (
	"fmt"
	"strings"
)

// capNames are the Linux capabilities by number.
var capNames = [...]string{
	"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
	"IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
	"SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
	"LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
	"WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
}

// capMask turns capability names ("CAP_NET_RAW", "net_raw") into a mask.
func capMask(names []string) (uint64, error) {
	var m uint64
	for _, n := range names {
		u := strings.TrimPrefix(strings.ToUpper(n), "CAP_")
		found := false
		for i, c := range capNames {
			if c == u {
				m |= 1 << i
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
	}
	return m, nil
}
