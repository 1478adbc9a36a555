package changeset

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FileState is what a fingerprint records of one original path: whether
// it exists and, if so, its type and identity. Directories record only
// type and inode (their times change with their contents).
type FileState struct {
	Absent bool   `json:"absent,omitempty"`
	Mode   uint32 `json:"mode,omitempty"` // fs.FileMode
	Size   int64  `json:"size,omitempty"`
	MTime  int64  `json:"mtime,omitempty"` // ns since the epoch
	CTime  int64  `json:"ctime,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
}

// Fingerprints records, for each entry of a changeset, the state of the
// original when the run ended. Keys are [FingerprintKey] values. It
// serialises to JSON as a list, so that paths that are not UTF-8 survive.
type Fingerprints map[string]FileState

// FingerprintKey is the key of root and path in [Fingerprints].
func FingerprintKey(root int, path string) string {
	return strconv.Itoa(root) + "\x00" + path
}

func splitKey(k string) (int, string, error) {
	i := strings.IndexByte(k, 0)
	if i < 0 {
		return 0, "", fmt.Errorf("bad fingerprint key %q", k)
	}
	r, err := strconv.Atoi(k[:i])
	if err != nil || r < 0 {
		return 0, "", fmt.Errorf("bad fingerprint key %q", k)
	}
	return r, k[i+1:], nil
}

type fingerprintJSON struct {
	Root       int    `json:"root"`
	Path       string `json:"path,omitempty"`
	PathBase64 string `json:"path_base64,omitempty"`
	FileState
}

// MarshalJSON writes the fingerprints as a list sorted by key.
func (f Fingerprints) MarshalJSON() ([]byte, error) {
	if f == nil {
		return []byte("null"), nil
	}
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sortStrings(keys)
	list := make([]fingerprintJSON, 0, len(keys))
	for _, k := range keys {
		r, p, err := splitKey(k)
		if err != nil {
			return nil, err
		}
		j := fingerprintJSON{Root: r, FileState: f[k]}
		if utf8.ValidString(p) {
			j.Path = p
		} else {
			j.PathBase64 = base64.StdEncoding.EncodeToString([]byte(p))
		}
		list = append(list, j)
	}
	return json.Marshal(list)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (f *Fingerprints) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = nil
		return nil
	}
	var list []fingerprintJSON
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	m := make(Fingerprints, len(list))
	for _, j := range list {
		p := j.Path
		if j.PathBase64 != "" {
			raw, err := base64.StdEncoding.DecodeString(j.PathBase64)
			if err != nil {
				return fmt.Errorf("fingerprint path: %w", err)
			}
			p = string(raw)
		}
		m[FingerprintKey(j.Root, p)] = j.FileState
	}
	*f = m
	return nil
}

// Conflict is an original path that changed since the run.
type Conflict struct {
	Root int
	Path string
	Why  string // "changed since the run", "created since the run", "deleted since the run"
}

// Reasons for a conflict.
const (
	WhyChanged = "changed since the run"
	WhyCreated = "created since the run"
	WhyDeleted = "deleted since the run"
)

// ConflictError lists the conflicts that stopped an apply; it matches
// [ErrConflict] with errors.Is.
type ConflictError struct {
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	n := len(e.Conflicts)
	if n == 1 {
		b.WriteString("1 original path changed since the run: ")
	} else {
		fmt.Fprintf(&b, "%d original paths changed since the run: ", n)
	}
	for i, c := range e.Conflicts {
		if i == 5 {
			fmt.Fprintf(&b, ", and %d more", n-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quotePath(c.Path) + " (" + c.Why + ")")
	}
	b.WriteString(" (apply with force to overwrite)")
	return b.String()
}

func (e *ConflictError) Unwrap() error { return ErrConflict }
