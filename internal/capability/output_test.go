package capability

import (
	"slices"
	"strings"
	"testing"
)

func TestFromOutput(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []Finding // Source is RunError throughout
	}{
		{
			name: "ld.so",
			out:  "./server: error while loading shared libraries: libpq.so.5: cannot open shared object file: No such file or directory\n",
			want: []Finding{{Capability: "postgres", Evidence: "./server: error while loading shared libraries: libpq.so.5: cannot open shared object file: No such file or directory"}},
		},
		{
			name: "python import",
			out: `Traceback (most recent call last):
  File "/work/app.py", line 1, in <module>
    import psycopg2
  File "/work/.venv/lib/python3.12/site-packages/psycopg2/__init__.py", line 51, in <module>
    from psycopg2._psycopg import (                     # noqa
ImportError: libpq.so.5: cannot open shared object file: No such file or directory
`,
			want: []Finding{{Capability: "postgres", Evidence: "ImportError: libpq.so.5: cannot open shared object file: No such file or directory"}},
		},
		{
			name: "node",
			out: `node:internal/modules/cjs/loader:1460
  return process.dlopen(module, path.toNamespacedPath(filename));
                 ^

Error: libvips-cpp.so.42: cannot open shared object file: No such file or directory
    at Module._extensions..node (node:internal/modules/cjs/loader:1460:18)
  code: 'ERR_DLOPEN_FAILED'
`,
			want: []Finding{{Capability: "vips", Evidence: "Error: libvips-cpp.so.42: cannot open shared object file: No such file or directory"}},
		},
		{
			name: "ctypes and cffi",
			out: "OSError: libGL.so.1: cannot open shared object file: No such file or directory\n" +
				"OSError: cannot load library 'libcairo.so.2': libcairo.so.2: cannot open shared object file: No such file or directory\n" +
				"OSError: libmagic.so: cannot open shared object file: No such file or directory\n",
			want: []Finding{
				{Capability: "cairo", Evidence: "OSError: cannot load library 'libcairo.so.2': libcairo.so.2: cannot open shared object file: No such file or directory"},
				{Capability: "magic", Evidence: "OSError: libmagic.so: cannot open shared object file: No such file or directory"},
				{Capability: "opengl", Evidence: "OSError: libGL.so.1: cannot open shared object file: No such file or directory"},
			},
		},
		{
			name: "musl and full paths",
			out: "Error loading shared library libsqlite3.so.0: No such file or directory (needed by /app/node_modules/x.node)\n" +
				"Error: /opt/vendor/libzstd.so.1.5.4: cannot open shared object file: No such file or directory\n",
			want: []Finding{
				{Capability: "sqlite", Evidence: "Error loading shared library libsqlite3.so.0: No such file or directory (needed by /app/node_modules/x.node)"},
				{Capability: "zstd", Evidence: "Error: /opt/vendor/libzstd.so.1.5.4: cannot open shared object file: No such file or directory"},
			},
		},
		{
			name: "unknown soname, repeated",
			out:  "a: error while loading shared libraries: libfoo.so.1: cannot open shared object file\nb: error while loading shared libraries: libfoo.so.1: cannot open shared object file\n",
			want: []Finding{{Evidence: "a: error while loading shared libraries: libfoo.so.1: cannot open shared object file"}},
		},
		{
			name: "compiler",
			out: "      psycopg/psycopgmodule.c:28:10: fatal error: libpq-fe.h: No such file or directory\n" +
				"src/lxml/etree.c:97:10: fatal error: 'libxml/xmlversion.h' file not found\n" +
				"c/_cffi_backend.c:15:10: fatal error: ffi.h: No such file or directory\n" +
				"x.c:1:10: fatal error: myproject.h: No such file or directory\n",
			want: []Finding{
				{Capability: "ffi", Evidence: "c/_cffi_backend.c:15:10: fatal error: ffi.h: No such file or directory"},
				{Capability: "postgres", Evidence: "psycopg/psycopgmodule.c:28:10: fatal error: libpq-fe.h: No such file or directory"},
				{Capability: "xml", Evidence: "src/lxml/etree.c:97:10: fatal error: 'libxml/xmlversion.h' file not found"},
			},
		},
		{
			name: "pkg-config and cargo",
			out: "Package pangocairo was not found in the pkg-config search path.\n" +
				"Package 'libpq', required by 'virtual:world', not found\n" +
				"  The system library `openssl` required by crate `openssl-sys` was not found.\n" +
				"Package 'nonesuch', required by 'virtual:world', not found\n",
			want: []Finding{
				{Capability: "pango", Evidence: "Package pangocairo was not found in the pkg-config search path."},
				{Capability: "postgres", Evidence: "Package 'libpq', required by 'virtual:world', not found"},
				{Capability: "ssl", Evidence: "The system library `openssl` required by crate `openssl-sys` was not found."},
			},
		},
		{
			name: "tool messages",
			out: "    Error: pg_config executable not found.\n" +
				"ImportError: failed to find libmagic.  Check your installation\n" +
				"OSError: no library called \"cairo-2\" was found\n" +
				"OSError: cannot load library 'pango-1.0-0': pango-1.0-0: cannot open shared object file: No such file or directory.\n",
			want: []Finding{
				{Capability: "cairo", Evidence: `OSError: no library called "cairo-2" was found`},
				{Capability: "magic", Evidence: "ImportError: failed to find libmagic.  Check your installation"},
				{Capability: "pango", Evidence: "OSError: cannot load library 'pango-1.0-0': pango-1.0-0: cannot open shared object file: No such file or directory."},
				{Capability: "postgres", Evidence: "Error: pg_config executable not found."},
			},
		},
		{name: "clean output", out: "collected 12 items\n\n12 passed in 0.31s\n"},
		{name: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.want {
				tt.want[i].Source = RunError
			}
			got := FromOutput([]byte(tt.out))
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", dump(got), dump(tt.want))
			}
		})
	}
}

func TestFromOutputLongLine(t *testing.T) {
	line := strings.Repeat("x", 1000) + " error while loading shared libraries: libpq.so.5: cannot open shared object file"
	got := FromOutput([]byte(line))
	if len(got) != 1 || got[0].Capability != "postgres" || len(got[0].Evidence) > maxEvidence+3 {
		t.Errorf("got %+v", got)
	}
}
