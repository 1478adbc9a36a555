package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/suggest"
)

// flagSet declares a command's flags on its pflag set (cobra's): docker
// style, --name value, --name=value, short forms that combine (-it),
// repeatable list flags that never split on commas, and a placeholder for
// each value in the help (--mount SRC:DST[:ro]).
type flagSet struct {
	name string
	fs   *pflag.FlagSet
}

func short(b byte) string {
	if b == 0 {
		return ""
	}
	return string(b)
}

func (f *flagSet) Bool(p *bool, long string, shortName byte, usage string) {
	f.fs.BoolVarP(p, long, short(shortName), *p, usage)
}

func (f *flagSet) String(p *string, long string, shortName byte, arg, usage string) {
	f.fs.VarP(&stringValue{p: p, arg: arg}, long, short(shortName), usage)
}

func (f *flagSet) List(p *[]string, long string, shortName byte, arg, usage string) {
	f.fs.VarP(&listValue{p: p, arg: arg}, long, short(shortName), usage)
}

// stringValue is a string flag whose help shows arg as its value.
type stringValue struct {
	p   *string
	arg string
}

func (v *stringValue) String() string     { return *v.p }
func (v *stringValue) Set(s string) error { *v.p = s; return nil }
func (v *stringValue) Type() string       { return v.arg }

// listValue is a repeatable flag: each use adds one value, as given.
type listValue struct {
	p   *[]string
	arg string
}

func (v *listValue) String() string     { return strings.Join(*v.p, ",") }
func (v *listValue) Set(s string) error { *v.p = append(*v.p, s); return nil }
func (v *listValue) Type() string       { return v.arg }

// errorf is a usage error of the command.
func (f *flagSet) errorf(format string, a ...any) error {
	e := fault.New(fault.Usage, fmt.Sprintf(format, a...), "", "see pinfold "+f.name+" --help", nil)
	e.Exit = fault.ExitUsage
	return e
}

// flagError turns pflag's complaint about a flag into a coded usage
// error, with the flags the command has that are closest to the one given.
func flagError(cmdName string, fs *pflag.FlagSet, err error) error {
	msg := err.Error()
	fix := "see pinfold " + cmdName + " --help"
	name := ""
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		name = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// unknown shorthand flag: 'x' in -x
		if i := strings.LastIndex(msg, " in -"); i >= 0 {
			name = msg[i+5:]
		}
	}
	if name != "" {
		if s := closest(name, fs); len(s) > 0 {
			fix = "did you mean " + strings.Join(s, " or ") + "? (pinfold " + cmdName + " --help lists them)"
		}
	}
	e := fault.New(fault.Usage, msg, "", fix, err)
	e.Exit = fault.ExitUsage
	return e
}

// closest returns the flags of fs nearest to name, in --long form.
func closest(name string, fs *pflag.FlagSet) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	fs.VisitAll(func(f *pflag.Flag) {
		d := suggest.Distance(name, f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if d <= 2 || d <= len(name)/3 {
			cs = append(cs, cand{"--" + f.Name, d})
		}
	})
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i, c := range cs {
		if i == 3 || c.d > cs[0].d {
			break
		}
		out = append(out, c.name)
	}
	return out
}
