package changeset

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestReplayMeta(t *testing.T) {
	m := Meta{ID: "0123456789ab", Created: time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC),
		Command: []string{"sh", "-c", "echo \"a\\b\"\t<&>"}, Workspace: "/w \"q\"",
		Roots: []MetaRoot{{Path: "/w \"q\"", Dir: "r0"}, {Path: "/c", Dir: "r1"}}, Status: StatusRunning}
	b, err := ReplayMeta(&m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "{\n  \"id\": \"0123456789ab\",\n  \"created\": \"2026-01-02T03:04:05.000000600Z\",\n  \"command\": [\"sh\",\"-c\",\"echo \\\"a\\\\b\\\"\\u0009<&>\"],\n  \"workspace\": ") ||
		!strings.HasSuffix(string(b), "}\n") {
		t.Errorf("ReplayMeta:\n%s", b)
	}
	// It reads back as m, and as Save writes m.
	var got Meta
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	saved, _ := json.MarshalIndent(&m, "", "  ")
	again, _ := json.MarshalIndent(&got, "", "  ")
	if !bytes.Equal(saved, again) {
		t.Errorf("read back:\n%s\nwant:\n%s", again, saved)
	}
}

func TestReplayTailRefuses(t *testing.T) {
	ok := Meta{ID: "0123456789ab", Created: time.Now().UTC(), Command: []string{"true"}, Workspace: "/w",
		Roots: []MetaRoot{{Path: "/w", Dir: "r0"}}, Status: StatusRunning}
	if _, err := ReplayTail(&ok); err != nil {
		t.Fatalf("a running changeset: %v", err)
	}
	for name, change := range map[string]func(m *Meta){
		"open":     func(m *Meta) { m.Status = StatusOpen },
		"finished": func(m *Meta) { m.Finished = time.Now() },
		"counts":   func(m *Meta) { m.Counts = &Counts{} },
		"short id": func(m *Meta) { m.ID = "abc" },
	} {
		m := ok
		change(&m)
		if tail, err := ReplayTail(&m); err == nil {
			t.Errorf("%s: tail %q, want an error", name, tail)
		}
	}
}
