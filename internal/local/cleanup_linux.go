package local

import (
	"io/fs"
	"os"
	"path/filepath"
)

// chmodTree gives the owner full access to every directory under dir, so
// that RemoveAll can empty them. WalkDir calls us for a directory before it
// reads it, so the chmod comes first; it does not follow symlinks, and it
// skips what it still cannot read.
func chmodTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
}
