package pack

import "testing"

func TestCovers(t *testing.T) {
	a := &Archive{}
	a.Config.Config.WorkingDir = "/var/tmp/pfq/app/sub"
	a.Config.Config.Labels = map[string]string{LabelWorkspace: "/var/tmp/pfq/app"}
	paths := map[string]bool{"/": false, "/bin": false, "/bin/sh": true, "/lib": true, "/var": false, "/var/tmp": false,
		"/var/tmp/pfq": false, "/var/tmp/pfq/app": false, "/var/tmp/pfq/app/run.sh": false, "/etc": false}
	for _, c := range []struct {
		target string
		covers bool
	}{
		{"/var/tmp/pfq", true},           // holds the workspace
		{"/var/tmp/pfq/app", true},       // is it
		{"/var/tmp/pfq/app/x/y", true},   // below it
		{"/var/tmp/pfq/app/sub", true},   // the working directory
		{"/var/tmp/pfq/other", false},    // beside it, not in the image
		{"/bin", true},                   // a directory of the image
		{"/etc/", true},                  // the same, unclean
		{"/bin/sh", true},                // a file of the image
		{"/lib/x", true},                 // through a symbolic link
		{"/", true},                      // holds everything
		{"/data", false},                 // not in the image
		{"/bin2", false},                 // a prefix is not a parent
		{"/var/tmp/pfq/app2/x", false},   // nor here
		{"/var/tmp/pfq/app/../x", false}, // cleaned: /var/tmp/pfq/x
	} {
		if got := a.Covers(c.target, paths) != ""; got != c.covers {
			t.Errorf("Covers(%q) = %v, want %v (%s)", c.target, got, c.covers, a.Covers(c.target, paths))
		}
	}
	// A working directory of / is the whole image: only its paths count.
	a.Config.Config.WorkingDir, a.Config.Config.Labels = "/", nil
	if why := a.Covers("/data", paths); why != "" {
		t.Errorf("working directory /: /data covers %s", why)
	}
}
