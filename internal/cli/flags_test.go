package cli

import (
	"reflect"
	"testing"
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
		fs := newFlagSet("test")
		fs.Bool(&r.tty, "tty", 't', "")
		fs.Bool(&r.it, "interactive", 'i', "")
		fs.String(&r.s, "name", 'n', "N", "")
		fs.List(&r.list, "env", 'e', "E", "")
		rest, err := fs.Parse(args)
		r.rest, r.hasError = rest, err != nil
		return r
	}
	for _, c := range []struct {
		args []string
		want res
	}{
		{[]string{"-it", "sh"}, res{tty: true, it: true, rest: []string{"sh"}}},
		{[]string{"--name", "x", "--name=y", "--", "-t"}, res{s: "y", rest: []string{"-t"}}},
		{[]string{"-e", "A=1", "-eB=2", "--env=C", "cmd", "-e", "D"}, res{list: []string{"A=1", "B=2", "C"}, rest: []string{"cmd", "-e", "D"}}},
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
