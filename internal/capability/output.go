package capability

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
)

// maxEvidence bounds the output line quoted as evidence.
const maxEvidence = 240

// FromOutput finds missing system libraries in a failed run's output:
// loader errors (ld.so, musl, and the Python, Node and ctypes errors that
// wrap them), missing C headers and pkg-config modules in builds, and a
// few tools' own messages (pg_config, mysql_config, "failed to find
// libmagic"...). A loader error for a soname no capability provides gives
// a Finding with Capability "". Each library or capability is reported
// once, with the first line that shows it.
func FromOutput(out []byte) []Finding {
	var found []Finding
	seen := map[string]bool{}
	add := func(key, capability string, line []byte) {
		if seen[key] {
			return
		}
		seen[key] = true
		found = append(found, Finding{Capability: capability, Source: RunError, Evidence: evidence(line)})
	}
	for line := range bytes.Lines(out) {
		if so := missingSoname(line); so != "" {
			c, _ := BySoname(so)
			add("so:"+so, c, line)
			continue
		}
		for _, c := range buildNeeds(line) {
			add("cap:"+c, c, line)
		}
	}
	sortFindings(found)
	return found
}

// missingSoname returns the library a loader error names, or "".
func missingSoname(line []byte) string {
	var so string
	if i := bytes.Index(line, []byte(": cannot open shared object file")); i >= 0 {
		// "...: error while loading shared libraries: libpq.so.5: cannot open..."
		// "OSError: cannot load library 'libx.so.2': libx.so.2: cannot open..."
		s := strings.TrimRight(string(line[:i]), " '\"`")
		so = s[strings.LastIndexAny(s, " :'\"`(")+1:]
	} else if _, after, ok := bytes.Cut(line, []byte("Error loading shared library ")); ok {
		// musl: "Error loading shared library libpq.so.5: No such file or directory (needed by ...)"
		s, _, _ := strings.Cut(string(after), ":")
		so = strings.TrimSpace(s)
	}
	so = filepath.Base(so)
	if !strings.Contains(so, ".so") {
		return ""
	}
	return so
}

// buildNeeds returns the capabilities a build or tool error line asks for.
func buildNeeds(line []byte) []string {
	s := string(line)
	var caps []string
	// gcc: "fatal error: libpq-fe.h: No such file or directory"
	// clang: "fatal error: 'libpq-fe.h' file not found"
	if _, after, ok := strings.Cut(s, "fatal error: "); ok {
		h, _, _ := strings.Cut(after, ": No such file")
		h, _, _ = strings.Cut(h, " file not found")
		caps = append(caps, lookup(headerCaps[:], strings.Trim(strings.TrimSpace(h), "'\"<>"))...)
	}
	// Rust's pkg-config crate: "The system library `libpq` required by crate `pq-sys` was not found."
	if _, after, ok := strings.Cut(s, "required by crate `"); ok {
		crate, _, _ := strings.Cut(after, "`")
		caps = append(caps, lookup(crateCaps[:], normalizeCrate(crate))...)
	}
	// pkg-config: "Package libpq was not found in the pkg-config search path"
	// pkgconf: "Package 'libpq', required by 'virtual:world', not found"
	if _, after, ok := strings.Cut(s, "Package "); ok && strings.Contains(after, "not found") {
		mod := strings.FieldsFunc(after, func(r rune) bool { return r == ' ' || r == '\'' || r == ',' })
		if len(mod) > 0 {
			caps = append(caps, lookup(pkgConfigCaps[:], mod[0])...)
		}
	}
	for _, p := range phrases[:] {
		if strings.Contains(s, p.key) {
			caps = append(caps, p.capability)
		}
	}
	slices.Sort(caps)
	return slices.Compact(caps)
}

func evidence(line []byte) string {
	s := strings.TrimSpace(string(line))
	if len(s) > maxEvidence {
		s = s[:maxEvidence] + "..."
	}
	return s
}

// phrases are messages tools print when a library or program is missing,
// in the tool's own words.
var phrases = [...]pair{
	{"pg_config executable not found", "postgres"},
	{"mysql_config not found", "mysql"},
	{"Can not find valid pkg-config name", "mysql"}, // mysqlclient >= 2.2
	{"Could not find directory of OpenSSL installation", "ssl"},
	{"failed to find libmagic", "magic"},
	{`no library called "cairo`, "cairo"},
	{"cannot load library 'pango", "pango"},
	{"cannot load library 'libpango", "pango"},
	{"cannot load library 'gobject", "glib"},
	{"cannot load library 'libgobject", "glib"},
	{"PortAudio library not found", "audio"},
	{"MagickWand shared library not found", "imagemagick"},
	{"Is poppler installed and in PATH", "poppler"},
	{"tesseract is not installed or it's not in your PATH", "tesseract"},
	{"Couldn't find ffmpeg", "ffmpeg"},
	{"No such file or directory: 'ffmpeg'", "ffmpeg"},
	{"make sure the Graphviz executables are on your systems' PATH", "graphviz"},
	{"Host system is missing dependencies to run browsers", "browser"},
	{"NoBackendError: No backend available", "usb"},
}

// headerCaps: headers as a compiler names them when they are missing,
// sorted; the Build packages of the capability install them.
var headerCaps = [...]pair{
	{"EGL/egl.h", "opengl"}, {"GL/gl.h", "opengl"}, {"MagickWand/MagickWand.h", "imagemagick"},
	{"X11/Xlib.h", "x11"}, {"X11/extensions/XTest.h", "x11"}, {"alsa/asoundlib.h", "audio"},
	{"avif/avif.h", "imagecodecs"}, {"bzlib.h", "bz2"}, {"cairo.h", "cairo"},
	{"cairo/cairo.h", "cairo"}, {"cblas.h", "blas"}, {"curl/curl.h", "curl"}, {"curses.h", "ncurses"},
	{"dbus/dbus.h", "dbus"}, {"expat.h", "expat"}, {"ffi.h", "ffi"},
	{"fontconfig/fontconfig.h", "fontconfig"}, {"ft2build.h", "freetype"}, {"fuse.h", "fuse"},
	{"fuse_lowlevel.h", "fuse"}, {"gdal.h", "gdal"}, {"gdbm.h", "gdbm"}, {"geos_c.h", "geos"},
	{"gif_lib.h", "imagecodecs"}, {"git2.h", "git"}, {"glib-object.h", "glib"}, {"glib.h", "glib"},
	{"gmp.h", "gmp"}, {"gmpxx.h", "gmp"}, {"graphviz/cgraph.h", "graphviz"},
	{"graphviz/gvc.h", "graphviz"}, {"gssapi.h", "kerberos"}, {"gssapi/gssapi.h", "kerberos"},
	{"gtk/gtk.h", "gtk"}, {"hb.h", "pango"}, {"hdf5.h", "hdf5"}, {"jpeglib.h", "imagecodecs"},
	{"krb5.h", "kerberos"}, {"lapacke.h", "blas"}, {"lber.h", "ldap"}, {"lcms2.h", "imagecodecs"},
	{"ldap.h", "ldap"}, {"leptonica/allheaders.h", "tesseract"}, {"libavcodec/avcodec.h", "ffmpeg"},
	{"libavformat/avformat.h", "ffmpeg"}, {"libavutil/avutil.h", "ffmpeg"},
	{"libheif/heif.h", "imagecodecs"}, {"libmemcached/memcached.h", "memcached"},
	{"libpq-fe.h", "postgres"}, {"librdkafka/rdkafka.h", "kafka"}, {"libsecret/secret.h", "secret"},
	{"libssh/libssh.h", "ssh"}, {"libssh2.h", "ssh"}, {"libudev.h", "udev"},
	{"libusb-1.0/libusb.h", "usb"}, {"libusb.h", "usb"}, {"libxml/parser.h", "xml"},
	{"libxml/xmlversion.h", "xml"}, {"libxslt/xslt.h", "xml"}, {"libxslt/xsltconfig.h", "xml"},
	{"lz4.h", "lz4"}, {"lzma.h", "lzma"}, {"magic.h", "magic"}, {"mpc.h", "gmp"}, {"mpfr.h", "gmp"},
	{"mpi.h", "mpi"}, {"mysql.h", "mysql"}, {"mysql/mysql.h", "mysql"}, {"ncurses.h", "ncurses"},
	{"netcdf.h", "netcdf"}, {"openjpeg.h", "imagecodecs"}, {"openssl/crypto.h", "ssl"},
	{"openssl/evp.h", "ssl"}, {"openssl/opensslv.h", "ssl"}, {"openssl/ssl.h", "ssl"},
	{"pango/pango.h", "pango"}, {"pango/pangocairo.h", "pango"}, {"pcap.h", "pcap"},
	{"png.h", "imagecodecs"}, {"poppler/cpp/poppler-document.h", "poppler"}, {"portaudio.h", "audio"},
	{"proj.h", "proj"}, {"readline/readline.h", "readline"}, {"sasl/sasl.h", "sasl"},
	{"snappy-c.h", "snappy"}, {"snappy.h", "snappy"}, {"sndfile.h", "audio"}, {"sodium.h", "sodium"},
	{"sql.h", "odbc"}, {"sqlext.h", "odbc"}, {"sqlite3.h", "sqlite"},
	{"systemd/sd-daemon.h", "systemd"}, {"systemd/sd-journal.h", "systemd"},
	{"tesseract/baseapi.h", "tesseract"}, {"tiffio.h", "imagecodecs"}, {"turbojpeg.h", "imagecodecs"},
	{"unicode/utypes.h", "icu"}, {"unicode/uversion.h", "icu"}, {"uuid/uuid.h", "uuid"},
	{"vips/vips.h", "vips"}, {"vips/vips8", "vips"}, {"wand/MagickWand.h", "imagemagick"},
	{"webp/decode.h", "imagecodecs"}, {"webp/encode.h", "imagecodecs"}, {"xmlsec/xmlsec.h", "xmlsec"},
	{"yaml.h", "yaml"}, {"zlib.h", "zlib"}, {"zmq.h", "zmq"}, {"zstd.h", "zstd"},
}

// pkgConfigCaps: pkg-config modules, sorted (case matters, as it does to
// pkg-config).
var pkgConfigCaps = [...]pair{
	{"MagickCore", "imagemagick"}, {"MagickWand", "imagemagick"}, {"alsa", "audio"}, {"blas", "blas"},
	{"bzip2", "bz2"}, {"cairo", "cairo"}, {"cairo-gobject", "cairo"}, {"dbus-1", "dbus"},
	{"egl", "opengl"}, {"expat", "expat"}, {"fontconfig", "fontconfig"}, {"freetype2", "freetype"},
	{"fuse", "fuse"}, {"fuse3", "fuse"}, {"gdal", "gdal"}, {"gdk-3.0", "gtk"},
	{"gdk-pixbuf-2.0", "gtk"}, {"geos", "geos"}, {"gio-2.0", "glib"}, {"gl", "opengl"},
	{"glib-2.0", "glib"}, {"gmp", "gmp"}, {"gobject-2.0", "glib"},
	{"gobject-introspection-1.0", "glib"}, {"gtk+-3.0", "gtk"}, {"harfbuzz", "pango"},
	{"hdf5", "hdf5"}, {"hdf5-serial", "hdf5"}, {"icu-i18n", "icu"}, {"icu-io", "icu"},
	{"icu-uc", "icu"}, {"krb5", "kerberos"}, {"krb5-gssapi", "kerberos"}, {"lapack", "blas"},
	{"lber", "ldap"}, {"lcms2", "imagecodecs"}, {"ldap", "ldap"}, {"lept", "tesseract"},
	{"libavcodec", "ffmpeg"}, {"libavdevice", "ffmpeg"}, {"libavfilter", "ffmpeg"},
	{"libavformat", "ffmpeg"}, {"libavif", "imagecodecs"}, {"libavutil", "ffmpeg"},
	{"libcgraph", "graphviz"}, {"libcrypto", "ssl"}, {"libcurl", "curl"}, {"libexslt", "xml"},
	{"libffi", "ffi"}, {"libgit2", "git"}, {"libgvc", "graphviz"}, {"libheif", "imagecodecs"},
	{"libjpeg", "imagecodecs"}, {"liblz4", "lz4"}, {"liblzma", "lzma"}, {"libmariadb", "mysql"},
	{"libmemcached", "memcached"}, {"libopenjp2", "imagecodecs"}, {"libpcap", "pcap"},
	{"libpng", "imagecodecs"}, {"libpng16", "imagecodecs"}, {"libpq", "postgres"},
	{"libsasl2", "sasl"}, {"libsecret-1", "secret"}, {"libsodium", "sodium"}, {"libssh", "ssh"},
	{"libssh2", "ssh"}, {"libssl", "ssl"}, {"libswresample", "ffmpeg"}, {"libswscale", "ffmpeg"},
	{"libsystemd", "systemd"}, {"libtiff-4", "imagecodecs"}, {"libturbojpeg", "imagecodecs"},
	{"libudev", "udev"}, {"libusb-1.0", "usb"}, {"libwebp", "imagecodecs"}, {"libxml-2.0", "xml"},
	{"libxslt", "xml"}, {"libzmq", "zmq"}, {"libzstd", "zstd"}, {"mariadb", "mysql"},
	{"mit-krb5", "kerberos"}, {"mit-krb5-gssapi", "kerberos"}, {"mpfr", "gmp"},
	{"mysqlclient", "mysql"}, {"ncurses", "ncurses"}, {"ncursesw", "ncurses"}, {"netcdf", "netcdf"},
	{"odbc", "odbc"}, {"ompi", "mpi"}, {"ompi-c", "mpi"}, {"openblas", "blas"}, {"opengl", "opengl"},
	{"openssl", "ssl"}, {"pango", "pango"}, {"pangocairo", "pango"}, {"pangoft2", "pango"},
	{"poppler", "poppler"}, {"poppler-cpp", "poppler"}, {"portaudio-2.0", "audio"}, {"proj", "proj"},
	{"rdkafka", "kafka"}, {"rdkafka++", "kafka"}, {"readline", "readline"}, {"sndfile", "audio"},
	{"sqlite3", "sqlite"}, {"tesseract", "tesseract"}, {"tinfo", "ncurses"}, {"uuid", "uuid"},
	{"vips", "vips"}, {"vips-cpp", "vips"}, {"x11", "x11"}, {"xcb", "x11"}, {"xext", "x11"},
	{"xi", "x11"}, {"xmlsec1", "xmlsec"}, {"xmlsec1-openssl", "xmlsec"}, {"xrender", "x11"},
	{"xtst", "x11"}, {"yaml-0.1", "yaml"}, {"zlib", "zlib"},
}
