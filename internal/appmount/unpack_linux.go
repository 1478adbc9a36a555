package appmount

import (
	"context"
	"os"

	"github.com/pinfold/pinfold/internal/pack"
	"github.com/pinfold/pinfold/internal/store"
)

// Unpacked reports whether the app at path is unpacked in the store in
// dir ("" for the default): a native run then starts from there, not from
// its root image.
func Unpacked(dir, path string) bool {
	st, err := openStore(dir)
	if err != nil {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	root, err := pack.ReadAppRoot(f)
	if err != nil || root == nil {
		return false
	}
	cd, err := root.ConfigDigest(f)
	return err == nil && st.HasOCIBase(cd, store.ImportOptions{UIDShift: store.Shift()})
}

// Unpack unpacks the app at path into the store in dir ("" for the
// default), as a native run of it that does not mount it does. A mounted
// start is faster the first time and an unpacked one every time after
// (squashfuse starts, and reads the command's files cold, for every run):
// pinfold unpacks an app in the background after its first mounted run.
func Unpack(ctx context.Context, dir, path string) error {
	st, err := openStore(dir)
	if err != nil {
		return err
	}
	_, err = st.OCIBase(ctx, path, "", store.ImportOptions{UIDShift: store.Shift()})
	return err
}

func openStore(dir string) (*store.Store, error) {
	if dir == "" {
		d, err := store.DefaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	return store.Open(dir)
}
