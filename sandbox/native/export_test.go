package native

import "testing"

// SetTestLandlock has the sandboxes t starts show the paths in skip
// without a Landlock rule, and grant the paths in readOnly only reading,
// whatever their mounts allow: each shows the Landlock layer denying on
// its own.
func SetTestLandlock(t *testing.T, skip, readOnly []string) {
	set := func(paths []string) map[string]bool {
		m := map[string]bool{}
		for _, p := range paths {
			m[p] = true
		}
		return m
	}
	testLandlock.skip, testLandlock.readOnly = set(skip), set(readOnly)
	t.Cleanup(func() { testLandlock.skip, testLandlock.readOnly = nil, nil })
}
