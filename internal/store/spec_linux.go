package store

import (
	"context"

	"github.com/pinfold/pinfold/sandbox"
)

// SpecBase unpacks (or finds) the tar, image-file or debian-12 base of a
// sandbox in the store at dir, with its owners in the sandbox range (the
// roots native sandboxes share), and marks it in use until release. Its
// errors are *sandbox.SpecError, of the store or of the base.
func SpecBase(ctx context.Context, dir string, base sandbox.Base) (root string, release func(), err error) {
	st, err := Open(dir)
	if err != nil {
		return "", nil, &sandbox.SpecError{Field: "store", Err: err}
	}
	opt := ImportOptions{UIDShift: Shift()}
	var b Base
	switch base.Kind {
	case sandbox.BaseTar:
		b, err = st.TarBase(ctx, base.Path, opt)
	case sandbox.BaseOCI:
		b, err = st.OCIBase(ctx, base.Path, base.Ref, opt)
	case sandbox.BaseDebian12:
		b, err = st.CuratedBase(string(base.Kind))
	}
	if err != nil {
		return "", nil, &sandbox.SpecError{Field: "base", Err: err}
	}
	return b.Root, UseBase(b.Root), nil
}
