package serveconf

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// What pinfold parses and hands on is what the helper parses back.
func TestArgsRoundTrip(t *testing.T) {
	in := []string{"--socket", "/s", "--listen=127.0.0.1:0", "--tokens", "/t", "--policy", "/p",
		"--max-upload", "5", "--max-body", "6", "--kube-pool", "2", "--max-conns", "8",
		"--header-timeout", "1s", "--body-timeout", "2m", "--write-timeout", "3s", "--idle-timeout", "4h"}
	c := Default()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	c.Flags(fs, false)
	if err := fs.Parse(in); err != nil {
		t.Fatal(err)
	}
	want := Config{Socket: "/s", Listen: "127.0.0.1:0", Tokens: "/t", Policy: "/p", Version: "dev",
		MaxUpload: 5, MaxBody: 6, KubePool: 2, MaxConns: 8, HeaderTimeout: time.Second,
		BodyTimeout: 2 * time.Minute, WriteTimeout: 3 * time.Second, IdleTimeout: 4 * time.Hour}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	back := Default()
	fs2 := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	back.Flags(fs2, true)
	if err := fs2.Parse(append([]string{"--version", "v1"}, Args(fs)...)); err != nil {
		t.Fatal(err)
	}
	want.Version = "v1"
	if back != want {
		t.Fatalf("handed on %+v, want %+v", back, want)
	}
	// Flags not given are not handed on: the helper's defaults apply.
	fs3 := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	d := Default()
	d.Flags(fs3, false)
	fs3.Parse([]string{"--max-conns", "3"})
	if a := Args(fs3); !reflect.DeepEqual(a, []string{"--max-conns", "3"}) {
		t.Errorf("args %q", a)
	}
}

func TestCheck(t *testing.T) {
	if err := Default().Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, f := range []func(*Config){
		func(c *Config) { c.MaxConns = 0 }, func(c *Config) { c.HeaderTimeout = 0 }, func(c *Config) { c.BodyTimeout = -1 },
		func(c *Config) { c.WriteTimeout = 0 }, func(c *Config) { c.IdleTimeout = 0 },
	} {
		c := Default()
		f(&c)
		if c.Check() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
