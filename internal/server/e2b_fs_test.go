package server

import (
	"slices"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
)

// TestTreeEvents: WatchDir's events between two listings, in name order,
// removals last.
func TestTreeEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := map[string]agent.FileInfo{
		"a":     {Type: "file", Size: 1, Mode: 0o644, Modified: t0},
		"b":     {Type: "file", Size: 1, Mode: 0o644, Modified: t0},
		"c":     {Type: "file", Size: 1, Mode: 0o644, Modified: t0},
		"gone":  {Type: "file", Size: 1, Mode: 0o644, Modified: t0},
		"d":     {Type: "dir", Mode: 0o755, Modified: t0},
		"d/old": {Type: "file", Modified: t0},
	}
	cur := map[string]agent.FileInfo{
		"a":       {Type: "file", Size: 1, Mode: 0o644, Modified: t0},                  // unchanged
		"b":       {Type: "file", Size: 2, Mode: 0o644, Modified: t0},                  // written
		"c":       {Type: "file", Size: 1, Mode: 0o600, Modified: t0},                  // chmod
		"d":       {Type: "dir", Mode: 0o755, Modified: t0},                            // unchanged
		"d/new":   {Type: "file", Size: 3, Mode: 0o644, Modified: t0.Add(time.Second)}, // created with data
		"d/empty": {Type: "file", Mode: 0o644, Modified: t0},                           // created empty
	}
	want := []fsEvent{
		{"b", "EVENT_TYPE_WRITE"}, {"c", "EVENT_TYPE_CHMOD"},
		{"d/empty", "EVENT_TYPE_CREATE"}, {"d/new", "EVENT_TYPE_CREATE"}, {"d/new", "EVENT_TYPE_WRITE"},
		{"d/old", "EVENT_TYPE_REMOVE"}, {"gone", "EVENT_TYPE_REMOVE"},
	}
	if got := treeEvents(prev, cur); !slices.Equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
	if got := treeEvents(cur, cur); len(got) != 0 {
		t.Errorf("no change gave %v", got)
	}
}
