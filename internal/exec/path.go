package exec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/sandboxd/sandbox/wire"
)

// Bounds on Job.Files.
const (
	// MaxFiles bounds how many files one job may carry: each costs a few
	// syscalls, and real snippets send a handful.
	MaxFiles = 100
	// MaxFilesBytes bounds the files' total size. The API's body limit
	// (1 MiB) is the usual bound; this one protects callers of Run that do
	// not go through the API, and stays well inside a pod's emptyDir.
	MaxFilesBytes = 16 << 20
)

// checkFiles validates every file of a job before anything is written, so a
// bad job changes nothing.
func checkFiles(files []File) error {
	if len(files) > MaxFiles {
		return fmt.Errorf("%d files, over the limit of %d", len(files), MaxFiles)
	}
	total := 0
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if err := wire.ValidatePath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("file path %q is given twice", f.Path)
		}
		seen[f.Path] = true
		total += len(f.Content)
	}
	if total > MaxFilesBytes {
		return fmt.Errorf("files total %d bytes, over the limit of %d", total, MaxFilesBytes)
	}
	return nil
}

// writeFiles writes files into dir through an os.Root, so that no path and
// no symlink already in dir can place a file outside it. When owner is not
// nil the files and the directories made for them are given to that uid/gid,
// so an unprivileged child can use them.
func writeFiles(dir string, files []File, owner *[2]int) error {
	if len(files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open working directory: %w", err)
	}
	defer root.Close()
	for _, f := range files {
		if d := path.Dir(f.Path); d != "." {
			if err := mkdirOwned(root, d, owner); err != nil {
				return fmt.Errorf("write file %q: %w", f.Path, err)
			}
		}
		if err := writeNew(root, f); err != nil {
			return fmt.Errorf("write file %q: %w", f.Path, err)
		}
		if owner != nil {
			if err := root.Lchown(f.Path, owner[0], owner[1]); err != nil {
				return fmt.Errorf("write file %q: %w", f.Path, err)
			}
		}
	}
	return nil
}

// writeNew creates f, which must not exist: whatever is already in its
// place (a FIFO whose open would block, a symlink) fails the job instead.
func writeNew(root *os.Root, f File) error {
	w, err := root.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = w.Write(f.Content)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirOwned makes d and its parents inside root, owned by owner if set.
func mkdirOwned(root *os.Root, d string, owner *[2]int) error {
	if owner == nil {
		return root.MkdirAll(d, 0o755)
	}
	sofar := ""
	for c := range strings.SplitSeq(d, "/") {
		sofar = path.Join(sofar, c)
		err := root.Mkdir(sofar, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := root.Lchown(sofar, owner[0], owner[1]); err != nil {
			return err
		}
	}
	return nil
}
