package plan

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/config"
)

// dispatch returns the profile the first matching rule names.
func dispatch(f *config.File, args []string) (*config.Profile, *config.Rule) {
	line := strings.Join(args, " ")
	for i := range f.Dispatch {
		rule := &f.Dispatch[i]
		if ruleMatches(rule, args, line) {
			for j := range f.Profiles {
				if f.Profiles[j].Name == rule.Profile {
					return &f.Profiles[j], rule
				}
			}
		}
	}
	return nil, nil
}

func ruleMatches(rule *config.Rule, args []string, line string) bool {
	switch {
	case rule.Match != "":
		return globMatch(rule.Match, line)
	case rule.Command != "":
		if filepath.Base(args[0]) != rule.Command {
			return false
		}
		rest := args[1:]
		for i, g := range rule.Args {
			if i == len(rule.Args)-1 && g == "*" {
				return true // a trailing * also matches no argument
			}
			if i >= len(rest) || !globMatch(g, rest[i]) {
				return false
			}
		}
		return len(rule.Args) == 0 || len(rest) == len(rule.Args)
	case rule.Regex != "":
		re, err := rule.CompiledRegex()
		return err == nil && re.MatchString(line)
	}
	return false
}

func ruleText(rule *config.Rule, file string) string {
	var what string
	switch {
	case rule.Match != "":
		what = "match " + strconv.Quote(rule.Match)
	case rule.Command != "":
		what = "command " + rule.Command
		if len(rule.Args) > 0 {
			what += " args [" + strings.Join(rule.Args, ", ") + "]"
		}
	default:
		what = "regex " + strconv.Quote(rule.Regex)
	}
	return fmt.Sprintf("%s:%d: %s -> %s", file, rule.Pos.Line, what, rule.Profile)
}

// globMatch matches a glob in which * also crosses "/" (command lines and
// variable names are not paths).
func globMatch(glob, s string) bool {
	ok, err := matchGlob(glob, s)
	return err == nil && ok
}
