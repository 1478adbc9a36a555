package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/pinfold/pinfold/internal/fault"
)

// flagSet parses docker-style flags: --name value, --name=value, short
// forms that combine (-it), repeated list flags, and parsing stops at the
// first argument that is not a flag or after "--", so the command's own
// flags are never touched. (A small parser of our own: a general flag
// library would add start-up cost to every sandbox.)
type flagSet struct {
	name  string
	flags []*flagDef
	help  bool
}

type flagDef struct {
	long  string
	short byte
	arg   string // value placeholder; empty for booleans
	usage string
	b     *bool
	s     *string
	list  *[]string
}

func newFlagSet(name string) *flagSet {
	fs := &flagSet{name: name}
	fs.Bool(&fs.help, "help", 'h', "show this help")
	return fs
}

func (fs *flagSet) Bool(p *bool, long string, short byte, usage string) {
	fs.flags = append(fs.flags, &flagDef{long: long, short: short, usage: usage, b: p})
}

func (fs *flagSet) String(p *string, long string, short byte, arg, usage string) {
	fs.flags = append(fs.flags, &flagDef{long: long, short: short, arg: arg, usage: usage, s: p})
}

func (fs *flagSet) List(p *[]string, long string, short byte, arg, usage string) {
	fs.flags = append(fs.flags, &flagDef{long: long, short: short, arg: arg, usage: usage, list: p})
}

func (fs *flagSet) lookup(long string, short byte) *flagDef {
	for _, f := range fs.flags {
		if (long != "" && f.long == long) || (short != 0 && f.short == short) {
			return f
		}
	}
	return nil
}

func (f *flagDef) set(v string) {
	switch {
	case f.s != nil:
		*f.s = v
	case f.list != nil:
		*f.list = append(*f.list, v)
	}
}

// Parse consumes flags and returns the remaining arguments.
func (fs *flagSet) Parse(args []string) ([]string, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return args[i+1:], nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			f := fs.lookup(name, 0)
			if f == nil {
				return nil, fs.errorf("unknown flag --%s", name)
			}
			if f.b != nil {
				if hasVal {
					switch val {
					case "true", "1":
						*f.b = true
					case "false", "0":
						*f.b = false
					default:
						return nil, fs.errorf("--%s takes no value", name)
					}
				} else {
					*f.b = true
				}
				continue
			}
			if !hasVal {
				if i+1 >= len(args) {
					return nil, fs.errorf("--%s needs a value (%s)", name, f.arg)
				}
				i++
				val = args[i]
			}
			f.set(val)
		case len(a) > 1 && a[0] == '-':
			// -it, -e NAME=V, -eNAME=V
			for j := 1; j < len(a); j++ {
				f := fs.lookup("", a[j])
				if f == nil {
					return nil, fs.errorf("unknown flag -%c", a[j])
				}
				if f.b != nil {
					*f.b = true
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, fs.errorf("-%c needs a value (%s)", a[j], f.arg)
					}
					i++
					val = args[i]
				}
				f.set(val)
				break
			}
		default:
			return args[i:], nil
		}
	}
	return nil, nil
}

func (fs *flagSet) errorf(format string, a ...any) error {
	e := fault.New(fault.Usage, fmt.Sprintf(format, a...), "", "see pinfold "+fs.name+" --help", nil)
	e.Exit = fault.ExitUsage
	return e
}

// ParseAll is Parse for commands without a command of their own to run
// (diff, apply, export...): flags may also follow the arguments, until
// "--". It returns the arguments.
func (fs *flagSet) ParseAll(args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		rest, err := fs.Parse(args)
		if err != nil {
			return nil, err
		}
		n := len(args) - len(rest)
		if n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, nil
}

// Usage writes the flag list.
func (fs *flagSet) Usage(w io.Writer) {
	for _, f := range fs.flags {
		left := "      --" + f.long
		if f.short != 0 {
			left = "  -" + string(f.short) + ", --" + f.long
		}
		if f.arg != "" {
			left += " " + f.arg
		}
		fmt.Fprintf(w, "%-30s %s\n", left, f.usage)
	}
}
