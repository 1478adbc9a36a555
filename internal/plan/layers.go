package plan

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
)

// layer is one source of settings, lowest priority first.
type layer struct {
	s     *config.Settings
	label func(key string) string
	dir   string // host paths in this layer are relative to it
}

// layersFor finds the profile dispatch chooses and returns the layers:
// top-level settings, the profile, and the flags (defaults are implicit).
func layersFor(r *Request, p *Plan) ([]layer, error) {
	var ls []layer
	if f := r.Config; f != nil {
		p.Audit.Config = f.Path
		dir := filepath.Dir(f.Path)
		name := filepath.Base(f.Path)
		top := f.Settings
		ls = append(ls, layer{s: &top, dir: dir, label: func(k string) string {
			return fmt.Sprintf("%s:%d (top level)", name, top.Pos[k].Line)
		}})
		p.Dispatched = len(f.Dispatch) > 0
		if prof, rule := dispatch(f, r.Args); prof != nil {
			p.Audit.Profile = prof.Name
			p.Audit.Rule = ruleText(rule, name)
			s := prof.Settings
			pname := prof.Name
			ls = append(ls, layer{s: &s, dir: dir, label: func(k string) string {
				return fmt.Sprintf("%s:%d (profile %s)", name, s.Pos[k].Line, pname)
			}})
		}
	}
	fs, err := flagSettings(&r.Flags)
	if err != nil {
		return nil, err
	}
	ls = append(ls, layer{s: fs, dir: r.Cwd, label: func(k string) string { return FromFlag + " --" + flagName(k) }})
	return ls, nil
}

// flagName is the flag spelling of a setting.
func flagName(key string) string {
	switch key {
	case "cap_add":
		return "cap-add"
	case "capabilities":
		return "capability"
	case "mounts":
		return "mount"
	case "limits.tmp_size":
		return "tmp-size"
	case "limits.disk":
		return "disk"
	case "ports":
		return "publish"
	case "require_pinned_image":
		return "require-pinned-image"
	case "verify_signature", "trusted_keys":
		return "verify-key"
	}
	if strings.HasPrefix(key, "limits.") {
		return key[len("limits."):]
	}
	return key
}

// flagSettings expresses the flags as a settings layer.
func flagSettings(f *Flags) (*config.Settings, error) {
	s := &config.Settings{}
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	s.Backend, s.Base, s.Access, s.Workspace = str(f.Backend), str(f.Base), str(f.Access), str(f.Workspace)
	s.Workdir, s.Network, s.User, s.Hostname = str(f.Workdir), str(f.Network), str(f.User), str(f.Hostname)
	for _, m := range f.Mounts {
		mt, err := parseMount(m)
		if err != nil {
			return nil, err
		}
		s.Mounts = append(s.Mounts, mt)
	}
	s.CapAdd = f.CapAdd
	s.Capture = f.Capture
	s.Allow, s.Deny, s.Ports, s.DNS = f.Allow, f.Deny, f.Publish, f.DNS
	if f.HostLoopback {
		s.HostLoopback = &f.HostLoopback
	}
	if f.RequirePinnedImage {
		s.RequirePinnedImage = &f.RequirePinnedImage
	}
	if len(f.VerifyKeys) > 0 {
		t := true
		s.VerifySignature, s.TrustedKeys = &t, f.VerifyKeys
	}
	if f.Memory != "" || f.Pids != "" || f.CPUs != "" || f.Timeout != "" || f.TmpSize != "" || f.Disk != "" {
		l := &config.Limits{Memory: str(f.Memory), Timeout: str(f.Timeout), TmpSize: str(f.TmpSize), Disk: str(f.Disk)}
		if f.Pids != "" {
			n, err := strconv.ParseInt(f.Pids, 10, 64)
			if err != nil || n < 1 {
				return nil, badValue("--pids", f.Pids, "a positive number of processes")
			}
			l.Pids = &n
		}
		if f.CPUs != "" {
			c, err := strconv.ParseFloat(f.CPUs, 64)
			if err != nil || c <= 0 {
				return nil, badValue("--cpus", f.CPUs, "a positive number of CPUs, like 0.5 or 2")
			}
			l.CPUs = &c
		}
		s.Limits = l
	}
	return s, nil
}

func layerDir(ls []layer, i int, cwd string) string {
	if i < 0 {
		return cwd
	}
	return ls[i].dir
}
