package store

import (
	"context"
	"errors"
)

func (s *Store) OCIBase(ctx context.Context, path, ref string, opt ImportOptions) (Base, error) {
	return Base{}, errors.New("not yet")
}
