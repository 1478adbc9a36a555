//go:build linux && amd64

package native

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/changeset"
)

// TestReplayMetaMatchesGo checks that the changeset record launch.c
// writes on a replay is byte for byte the one changeset.ReplayMeta
// defines, and reads back as the recorded run's: launch.c's new_changeset
// is built on its own (testdata/replaymeta.c) and run on commands that
// need escaping.
func TestReplayMetaMatchesGo(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build launch.c")
	}
	bin := filepath.Join(t.TempDir(), "replaymeta")
	build := exec.Command(gcc, "-Os", "-static", "-nostdlib", "-ffreestanding", "-fno-builtin", "-fno-stack-protector",
		"-fcf-protection=none", "-Wno-unused-function", "-o", bin, "testdata/replaymeta.c")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building launch.c's new_changeset: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name    string
		command []string
	}{
		{"plain", []string{"make", "test"}},
		{"escapes", []string{"sh", "-c", "printf 'a\"b\\\\c' > \"new file\"\n\texit 3"}},
		{"control", []string{"x\x01\x1f\x7f", "<html> & </html>"}},
		{"unicode", []string{"échec", "日本", "\u2028"}},
		{"empty arg", []string{"true", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := t.TempDir()
			ws := t.TempDir()
			// The recorded run's changeset, as Go makes it.
			rec, err := changeset.Create(st, ws, nil, tc.command)
			if err != nil {
				t.Fatal(err)
			}
			tail, err := changeset.ReplayTail(&rec.Meta)
			if err != nil {
				t.Fatalf("ReplayTail: %v", err)
			}
			out, err := exec.Command(bin, append([]string{st, tail}, tc.command...)...).Output()
			if err != nil || len(out) != ChangesetIDLen {
				t.Fatalf("replaymeta: %q %v", out, err)
			}
			id := string(out)
			got, err := os.ReadFile(filepath.Join(st, "changesets", id, "meta.json"))
			if err != nil {
				t.Fatal(err)
			}
			var m changeset.Meta
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatalf("launch.c's meta.json does not parse: %v\n%s", err, got)
			}
			if m.ID != id || time.Since(m.Created) > time.Minute || time.Since(m.Created) < 0 {
				t.Errorf("id %q created %v, want %s, now", m.ID, m.Created, id)
			}
			// Byte for byte what Go defines for the same inputs...
			want := rec.Meta
			want.ID, want.Created = id, m.Created
			wantb, err := changeset.ReplayMeta(&want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, wantb) {
				t.Errorf("launch.c wrote\n%s\nchangeset.ReplayMeta\n%s", got, wantb)
			}
			// ...and the recorded run's record but for the id and time.
			if !slices.Equal(m.Command, rec.Meta.Command) {
				t.Errorf("command %q, want %q", m.Command, rec.Meta.Command)
			}
			m.ID, m.Created, m.Command = rec.Meta.ID, rec.Meta.Created, rec.Meta.Command
			a, _ := json.Marshal(&m)
			b, _ := json.Marshal(&rec.Meta)
			if !bytes.Equal(a, b) {
				t.Errorf("read back:\n%s\nrecorded:\n%s", a, b)
			}
		})
	}
}
