// Package probe is a placeholder removed once real code lands.
package probe

import _ "golang.org/x/sys/unix"
