//go:build !linux

package oci

import (
	"context"
	"errors"
	"fmt"
)

// Apply fails: unpacking layers safely needs Linux (openat2).
func Apply(ctx context.Context, img *Image, root string, opt ApplyOptions) (ApplyStats, error) {
	return ApplyStats{}, fmt.Errorf("applying image %s: %w", img.Source, errors.ErrUnsupported)
}
