// Package serveconf declares pinfold serve's flags, once: pinfold parses
// them and hands those given to the pinfold-api helper as arguments, which
// it parses with the same declaration. It imports neither net/http nor the
// server, so that pinfold itself links neither.
package serveconf

import (
	"errors"
	"time"

	"github.com/spf13/pflag"
)

// Defaults of the bounds; the server uses them for zero values too.
const (
	DefaultMaxBody       = 1 << 20
	DefaultMaxUpload     = 64 << 20
	DefaultMaxConns      = 256
	DefaultHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout   = 30 * time.Second
	DefaultWriteTimeout  = 30 * time.Second
	DefaultIdleTimeout   = 60 * time.Second
)

// Config is what pinfold serve is told.
type Config struct {
	Socket, Listen, Tokens, Policy string
	Version                        string
	MaxUpload, MaxBody             int64
	KubePool, MaxConns             int
	HeaderTimeout, BodyTimeout     time.Duration
	WriteTimeout, IdleTimeout      time.Duration
}

// Default is the configuration without flags.
func Default() Config {
	return Config{Version: "dev", MaxUpload: DefaultMaxUpload, MaxBody: DefaultMaxBody, MaxConns: DefaultMaxConns,
		HeaderTimeout: DefaultHeaderTimeout, BodyTimeout: DefaultBodyTimeout,
		WriteTimeout: DefaultWriteTimeout, IdleTimeout: DefaultIdleTimeout}
}

// Flags declares serve's flags on fs, each setting a field of c; c's
// values are their defaults. version says whether --version is declared:
// pinfold passes its own version to the helper and does not take one.
func (c *Config) Flags(fs *pflag.FlagSet, version bool) {
	str := func(p *string, name, arg, usage string) { fs.StringVar(p, name, *p, usage); named(fs, name, arg) }
	str(&c.Socket, "socket", "PATH", "unix socket (default: STORE/api.sock)")
	str(&c.Listen, "listen", "ADDR", "also listen on this TCP address (needs --tokens)")
	str(&c.Tokens, "tokens", "FILE", "TENANT TOKEN lines for TCP clients (mode 600)")
	str(&c.Policy, "policy", "FILE", "what tenants may ask for: bases, backends, networks, ports, limits (docs/api.md)")
	if version {
		str(&c.Version, "version", "VERSION", "version to report")
	}
	fs.Int64Var(&c.MaxUpload, "max-upload", c.MaxUpload, "largest file upload, in bytes")
	named(fs, "max-upload", "BYTES")
	fs.Int64Var(&c.MaxBody, "max-body", c.MaxBody, "largest JSON request body, in bytes")
	named(fs, "max-body", "BYTES")
	fs.IntVar(&c.KubePool, "kube-pool", c.KubePool, "keep N warm pods of every kubernetes session template (docs/kubernetes.md)")
	named(fs, "kube-pool", "N")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "connections served at once on each listener; more wait")
	named(fs, "max-conns", "N")
	dur := func(p *time.Duration, name, usage string) { fs.DurationVar(p, name, *p, usage); named(fs, name, "D") }
	dur(&c.HeaderTimeout, "header-timeout", "longest wait for a request's head")
	dur(&c.BodyTimeout, "body-timeout", "longest wait for a JSON body; uploads get more, by size")
	dur(&c.WriteTimeout, "write-timeout", "longest wait for a client to take each write of an answer")
	dur(&c.IdleTimeout, "idle-timeout", "longest wait for the next request on a kept-alive connection")
}

// Check refuses bounds that are not bounds.
func (c Config) Check() error {
	if c.MaxConns <= 0 || c.HeaderTimeout <= 0 || c.BodyTimeout <= 0 || c.WriteTimeout <= 0 || c.IdleTimeout <= 0 {
		return errors.New("--max-conns and the timeouts must be above zero: nothing is unbounded")
	}
	return nil
}

// Args are the flags of fs that were given, as arguments that Flags
// parses back into the same Config.
func Args(fs *pflag.FlagSet) []string {
	var a []string
	fs.Visit(func(f *pflag.Flag) { a = append(a, "--"+f.Name, f.Value.String()) })
	return a
}

// named has the help show arg as the flag's value (--max-body BYTES).
func named(fs *pflag.FlagSet, name, arg string) {
	f := fs.Lookup(name)
	f.Value = metavar{f.Value, arg}
}

type metavar struct {
	pflag.Value
	arg string
}

func (m metavar) Type() string { return m.arg }
