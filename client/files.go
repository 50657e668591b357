package client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/sandboxd/sandbox/wire"
)

// SaveFiles writes the output files of a result that came back with their
// content under dir, which must exist, and returns the paths it wrote;
// omitted and skipped entries are left out (the caller may report them).
//
// The paths come from the service, so they are treated as hostile: each
// must be a relative path inside dir (wire.ValidatePath), nothing is
// written outside dir (an os.Root), a symlink already in dir is never
// followed (a directory on the way that is a symlink fails the file, and a
// file is written beside its place and renamed over it, which replaces a
// symlink or a hard link there instead of writing through it). A file that
// already exists is replaced.
func SaveFiles(dir string, files []wire.OutputFile) ([]string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("save output files: %w", err)
	}
	defer root.Close()
	var saved []string
	var errs []error
	for _, f := range files {
		if f.Omitted || f.Skipped != "" {
			continue
		}
		if err := saveFile(root, f); err != nil {
			errs = append(errs, err)
			continue
		}
		saved = append(saved, f.Path)
	}
	return saved, errors.Join(errs...)
}

func saveFile(root *os.Root, f wire.OutputFile) error {
	if err := wire.ValidatePath(f.Path); err != nil {
		return fmt.Errorf("output file: %w", err)
	}
	b, err := f.Bytes()
	if err != nil {
		return fmt.Errorf("output file %s: %w", f.Path, err)
	}
	if err := mkdirs(root, path.Dir(f.Path)); err != nil {
		return fmt.Errorf("output file %s: %w", f.Path, err)
	}
	var r [6]byte
	rand.Read(r[:])
	tmp := path.Join(path.Dir(f.Path), ".sandbox-"+hex.EncodeToString(r[:])+".tmp")
	w, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("output file %s: %w", f.Path, err)
	}
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, f.Path)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("output file %s: %w", f.Path, err)
	}
	return nil
}

// mkdirs makes d and its parents in root, refusing to go through anything
// already there that is not a directory, a symlink above all.
func mkdirs(root *os.Root, d string) error {
	if d == "." {
		return nil
	}
	sofar := ""
	for c := range strings.SplitSeq(d, "/") {
		sofar = path.Join(sofar, c)
		err := root.Mkdir(sofar, 0o755)
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		fi, err := root.Lstat(sofar)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is in the way: a %s, not a directory", sofar, kind(fi.Mode()))
		}
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return m.Type().String()
}
