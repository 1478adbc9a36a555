package capability

import (
	"slices"
	"strings"
)

// The packages that wrap a system library, by ecosystem, as (package,
// capability) pairs sorted by package then capability; a package may
// appear more than once. Names are normalised as lookups normalise them
// (see normalize). Some of these packages ship wheels or prebuilt
// binaries that bundle the library; they are listed all the same because
// a source build needs it, and the ELF scan is the precise check.

// pair maps a key (a package, a header) to a capability.
type pair struct{ key, capability string }

// pypiCaps: PyPI projects, names as PEP 503 normalises them.
var pypiCaps = [...]pair{
	{"av", "ffmpeg"}, {"cairocffi", "cairo"}, {"cairosvg", "cairo"}, {"cartopy", "geos"},
	{"cartopy", "proj"}, {"cffi", "ffi"}, {"confluent-kafka", "kafka"}, {"cryptography", "ssl"},
	{"cysystemd", "systemd"}, {"dbus-python", "dbus"}, {"dbus-python", "glib"},
	{"ffmpeg-python", "ffmpeg"}, {"file-magic", "magic"}, {"fiona", "gdal"}, {"fusepy", "fuse"},
	{"gdal", "gdal"}, {"gmpy2", "gmp"}, {"gnureadline", "readline"}, {"graphviz", "graphviz"},
	{"gssapi", "kerberos"}, {"h5py", "hdf5"}, {"kerberos", "kerberos"}, {"krb5", "kerberos"},
	{"libnacl", "sodium"}, {"libusb1", "usb"}, {"lxml", "xml"}, {"lz4", "lz4"}, {"m2crypto", "ssl"},
	{"mariadb", "mysql"}, {"mpi4py", "mpi"}, {"mysqlclient", "mysql"}, {"netcdf4", "netcdf"},
	{"openai-whisper", "ffmpeg"}, {"opencv-contrib-python", "glib"},
	{"opencv-contrib-python", "opengl"}, {"opencv-python", "glib"}, {"opencv-python", "opengl"},
	{"pcapy-ng", "pcap"}, {"pdf2image", "poppler"}, {"pillow", "imagecodecs"}, {"pillow", "zlib"},
	{"pillow-simd", "imagecodecs"}, {"pillow-simd", "zlib"}, {"playwright", "browser"},
	{"psycopg", "postgres"}, {"psycopg-c", "postgres"}, {"psycopg2", "postgres"},
	{"psycopg2cffi", "postgres"}, {"pyaudio", "audio"}, {"pycairo", "cairo"}, {"pycurl", "curl"},
	{"pycurl", "ssl"}, {"pydub", "ffmpeg"}, {"pyfuse3", "fuse"}, {"pygit2", "git"},
	{"pyglet", "opengl"}, {"pygobject", "cairo"}, {"pygobject", "glib"}, {"pygraphviz", "graphviz"},
	{"pyheif", "imagecodecs"}, {"pyicu", "icu"}, {"pykerberos", "kerberos"}, {"pylibmc", "memcached"},
	{"pyodbc", "odbc"}, {"pyopengl", "opengl"}, {"pypcap", "pcap"}, {"pyppeteer", "browser"},
	{"pyproj", "proj"}, {"pyqt5", "fontconfig"}, {"pyqt5", "opengl"}, {"pyqt6", "fontconfig"},
	{"pyqt6", "opengl"}, {"pyside6", "fontconfig"}, {"pyside6", "opengl"}, {"pysqlite3", "sqlite"},
	{"pystemd", "systemd"}, {"pytesseract", "tesseract"}, {"python-ldap", "ldap"},
	{"python-ldap", "sasl"}, {"python-magic", "magic"}, {"python-poppler", "poppler"},
	{"python-snappy", "snappy"}, {"pyudev", "udev"}, {"pyusb", "usb"}, {"pyvips", "vips"},
	{"pyyaml", "yaml"}, {"pyzmq", "zmq"}, {"rasterio", "gdal"}, {"sasl", "sasl"}, {"shapely", "geos"},
	{"simpleaudio", "audio"}, {"sounddevice", "audio"}, {"soundfile", "audio"}, {"ssh-python", "ssh"},
	{"ssh2-python", "ssh"}, {"systemd-python", "systemd"}, {"tables", "hdf5"},
	{"tesserocr", "tesseract"}, {"turbodbc", "odbc"}, {"wand", "imagemagick"},
	{"weasyprint", "pango"}, {"xmlsec", "xml"}, {"xmlsec", "xmlsec"}, {"zstandard", "zstd"},
}

// npmCaps: npm packages.
var npmCaps = [...]pair{
	{"@playwright/test", "browser"}, {"canvas", "cairo"}, {"canvas", "imagecodecs"},
	{"canvas", "pango"}, {"cap", "pcap"}, {"electron", "browser"}, {"electron", "gtk"},
	{"ffi-napi", "ffi"}, {"fluent-ffmpeg", "ffmpeg"}, {"fuse-native", "fuse"}, {"gl", "opengl"},
	{"gl", "x11"}, {"gm", "imagemagick"}, {"imagemagick", "imagemagick"}, {"kerberos", "kerberos"},
	{"keytar", "secret"}, {"libpq", "postgres"}, {"libxmljs", "xml"}, {"libxmljs2", "xml"},
	{"msnodesqlv8", "odbc"}, {"node-hid", "udev"}, {"node-libcurl", "curl"},
	{"node-poppler", "poppler"}, {"node-tesseract-ocr", "tesseract"}, {"nodegit", "kerberos"},
	{"nodegit", "ssl"}, {"odbc", "odbc"}, {"pcap", "pcap"}, {"pdf-poppler", "poppler"},
	{"pg-native", "postgres"}, {"playwright", "browser"}, {"playwright-core", "browser"},
	{"puppeteer", "browser"}, {"robotjs", "x11"}, {"sharp", "vips"}, {"usb", "udev"},
	{"zeromq", "zmq"},
}

// crateCaps: crates, lower case with '-' for '_'.
var crateCaps = [...]pair{
	{"alsa-sys", "audio"}, {"bzip2-sys", "bz2"}, {"cairo-sys-rs", "cairo"}, {"curl-sys", "curl"},
	{"ffmpeg-sys-next", "ffmpeg"}, {"freetype-sys", "freetype"}, {"fuse", "fuse"},
	{"gdal-sys", "gdal"}, {"gdk-sys", "gtk"}, {"geos-sys", "geos"}, {"gio-sys", "glib"},
	{"glib-sys", "glib"}, {"gmp-mpfr-sys", "gmp"}, {"gobject-sys", "glib"}, {"gtk-sys", "gtk"},
	{"hdf5-sys", "hdf5"}, {"leptonica-sys", "tesseract"}, {"libdbus-sys", "dbus"},
	{"libffi-sys", "ffi"}, {"libgit2-sys", "git"}, {"libgssapi", "kerberos"},
	{"libheif-sys", "imagecodecs"}, {"libsodium-sys", "sodium"}, {"libsodium-sys-stable", "sodium"},
	{"libsqlite3-sys", "sqlite"}, {"libssh2-sys", "ssh"}, {"libsystemd-sys", "systemd"},
	{"libudev-sys", "udev"}, {"libusb1-sys", "usb"}, {"libvips", "vips"}, {"libxml", "xml"},
	{"libz-sys", "zlib"}, {"lz4-sys", "lz4"}, {"lzma-sys", "lzma"}, {"magic-sys", "magic"},
	{"mpi-sys", "mpi"}, {"mysqlclient-sys", "mysql"}, {"netcdf-sys", "netcdf"}, {"odbc-sys", "odbc"},
	{"openssl-sys", "ssl"}, {"pango-sys", "pango"}, {"pcap", "pcap"}, {"pq-sys", "postgres"},
	{"proj-sys", "proj"}, {"rdkafka-sys", "kafka"}, {"rust-icu-sys", "icu"}, {"sasl2-sys", "sasl"},
	{"servo-fontconfig-sys", "fontconfig"}, {"snappy-sys", "snappy"}, {"tesseract-sys", "tesseract"},
	{"turbojpeg-sys", "imagecodecs"}, {"x11", "x11"}, {"xcb", "x11"},
	{"yeslogic-fontconfig-sys", "fontconfig"}, {"zmq-sys", "zmq"}, {"zstd-sys", "zstd"},
}

// lookup returns the capabilities table lists for key.
func lookup(table []pair, key string) []string {
	i, _ := slices.BinarySearchFunc(table, key, func(p pair, k string) int { return strings.Compare(p.key, k) })
	var caps []string
	for ; i < len(table) && table[i].key == key; i++ {
		caps = append(caps, table[i].capability)
	}
	return caps
}
