package config

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxSize bounds what Load reads: a policy file is a few kilobytes.
const maxSize = 1 << 20

// Load reads, parses and checks the config file at path. Messages name
// the file as path is written; File.Path is absolute.
func Load(path string) (*File, error) { return load(path, 0, nil) }

// load is Load, the file opened with flag added to O_RDONLY, and check
// (when set) called on the open file before it is read.
func load(path string, flag int, check func(*os.File) error) (*File, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|flag, 0)
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot be read: " + errText(err), Err: err}
	}
	defer fh.Close()
	if check != nil {
		if err := check(fh); err != nil {
			return nil, &Error{Path: path, Msg: "is not used: " + err.Error(), Err: err}
		}
	}
	data, err := readAll(fh)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, &Error{Path: path, Msg: "is larger than 1 MiB; is it really a pinfold.yaml?"}
		}
		return nil, &Error{Path: path, Msg: "cannot be read: " + errText(err), Err: err}
	}
	// data is Load's own and never changes: the parser's strings can
	// share it rather than copy it.
	f, err := parse(path, stringOf(data))
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(path); err == nil {
		f.Path = abs
	}
	return f, nil
}

// Parse parses and checks a config file's contents; path is used in
// messages and stored in File.Path as it is.
func Parse(path string, data []byte) (*File, error) {
	return parse(path, string(data))
}

func parse(path, src string) (*File, error) {
	p := &parser{path: path, src: src}
	root, err := p.parse()
	if err != nil {
		return nil, err
	}
	d := decoder{p: p}
	f, err := d.file(&root)
	if err != nil {
		return nil, err
	}
	f.Path = path
	return f, nil
}

var errTooLarge = errors.New("too large")

// readAll reads what is left of f into a buffer sized from its length
// (a config is read on every command: no doubling buffers), up to
// maxSize bytes.
func readAll(f *os.File) ([]byte, error) {
	size := int64(512)
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		size = fi.Size() + 1 // +1 to see the end without growing
	}
	if size > maxSize+1 {
		return nil, errTooLarge
	}
	buf := make([]byte, 0, size)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > maxSize {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // the file grew: make room
		}
	}
}

// errText is an error's message without the path an *fs.PathError
// repeats.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
