//go:build !linux

package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
)

// Open fails: the store needs Linux (openat2, /proc).
func Open(dir string) (*Store, error) {
	return nil, fmt.Errorf("opening store: %w", errors.ErrUnsupported)
}

// Check has nothing to check where no store can be opened.
func Check(dir string) error { return nil }

// TarBase fails: the store needs Linux.
func (s *Store) TarBase(ctx context.Context, path string, opt ImportOptions) (Base, error) {
	return Base{}, fmt.Errorf("tar base: %w", errors.ErrUnsupported)
}

// CleanTmp fails: the store needs Linux.
func (s *Store) CleanTmp() ([]string, error) {
	return nil, fmt.Errorf("cleaning store: %w", errors.ErrUnsupported)
}

func absPath(p string) (string, error) { return filepath.Abs(p) }
