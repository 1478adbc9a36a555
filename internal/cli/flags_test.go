package cli

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pinfold/pinfold/internal/fault"
)

func TestFlagParsing(t *testing.T) {
	type res struct {
		tty, it  bool
		s        string
		list     []string
		rest     []string
		hasError bool
	}
	parse := func(args ...string) res {
		var r res
		pf := pflag.NewFlagSet("test", pflag.ContinueOnError)
		pf.SetInterspersed(false)
		pf.SetOutput(io.Discard)
		fs := &flagSet{name: "test", fs: pf}
		fs.Bool(&r.tty, "tty", 't', "")
		fs.Bool(&r.it, "interactive", 'i', "")
		fs.String(&r.s, "name", 'n', "N", "")
		fs.List(&r.list, "env", 'e', "E", "")
		err := pf.Parse(args)
		r.rest, r.hasError = pf.Args(), err != nil
		if len(r.rest) == 0 {
			r.rest = nil
		}
		return r
	}
	for _, c := range []struct {
		args []string
		want res
	}{
		{[]string{"-it", "sh"}, res{tty: true, it: true, rest: []string{"sh"}}},
		{[]string{"--name", "x", "--name=y", "--", "-t"}, res{s: "y", rest: []string{"-t"}}},
		{[]string{"-e", "A=1", "-eB=2", "--env=C,D", "cmd", "-e", "D"}, res{list: []string{"A=1", "B=2", "C,D"}, rest: []string{"cmd", "-e", "D"}}},
		{[]string{"-tn", "v", "x"}, res{tty: true, s: "v", rest: []string{"x"}}},
		{[]string{"--tty=false", "x"}, res{rest: []string{"x"}}},
		{[]string{"--nope"}, res{hasError: true}},
		{[]string{"-x"}, res{hasError: true}},
		{[]string{"--name"}, res{hasError: true}},
		{[]string{"--tty=maybe"}, res{hasError: true}},
		{[]string{}, res{}},
	} {
		got := parse(c.args...)
		if got.hasError {
			got.rest = nil
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v, want %+v", c.args, got, c.want)
		}
	}
}

func TestFlagSuggestions(t *testing.T) {
	pf := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs := &flagSet{name: "run", fs: pf}
	var s string
	var b bool
	for _, n := range []string{"network", "workdir", "workspace", "memory"} {
		fs.String(&s, n, 0, "X", "")
	}
	fs.Bool(&b, "tty", 't', "")
	for flag, want := range map[string]string{"netwrok": "--network", "memroy": "--memory", "workdri": "--workdir", "work": "--workdir or --workspace"} {
		err := flagError("run", pf, errors.New("unknown flag: --"+flag))
		var fe *fault.Error
		if !errors.As(err, &fe) || fe.Code != fault.Usage || fe.Exit != fault.ExitUsage || !strings.Contains(fe.Fix, "did you mean "+want+"?") {
			t.Errorf("--%s: got %v", flag, err)
		}
	}
	if err := flagError("run", pf, errors.New("unknown flag: --zzzzzzzz")); strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a far-off flag got a suggestion: %v", err)
	}
}
