//go:build linux

package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandboxd/sandbox/internal/exec"
)

// Seeding the pod's /tmp.
//
// Some libraries want a writable directory for a cache they would
// otherwise rebuild on every run: matplotlib refuses a read-only
// MPLCONFIGDIR (it warns and rebuilds its font list, some hundreds of
// milliseconds of CPU, in a fresh temporary directory). The image builds
// such caches at build time into a read-only tree; before taking its job
// the runner recreates that tree's directories in the pod's own /tmp (an
// emptyDir, writable) and links each file there to its read-only original.
// The library then finds a writable directory with its cache in it. The
// snippet may change what is in /tmp: it is its own pod's.

// SeedTmp recreates src's directories under dst and links src's files
// there. An entry already in place (a link to the same file, a directory)
// is left alone, anything else there is an error.
func SeedTmp(src, dst string) error {
	src, err := filepath.Abs(src)
	if err != nil {
		return fmt.Errorf("seed %s: %w", dst, err)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("seed %s: %w", dst, err)
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, 0o755); err != nil {
				return fmt.Errorf("seed %s: %w", dst, err)
			}
		case d.Type().IsRegular():
			err := os.Symlink(p, to)
			if errors.Is(err, fs.ErrExist) {
				if have, _ := os.Readlink(to); have == p {
					return nil
				}
			}
			if err != nil {
				return fmt.Errorf("seed %s: %w", dst, err)
			}
		}
		return nil
	})
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckSnippetEnv validates variables to add to the snippet's environment
// (NAME=VALUE each): a name may be given once, and none of the runner's own
// (exec.DefaultEnv), which the guarantees about the snippet's start rely on.
func CheckSnippetEnv(vars []string) error {
	own := map[string]bool{}
	for _, kv := range exec.DefaultEnv("/") {
		name, _, _ := strings.Cut(kv, "=")
		own[name] = true
	}
	seen := map[string]bool{}
	for _, kv := range vars {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || !envName.MatchString(name):
			return fmt.Errorf("snippet variable %q: want NAME=VALUE", kv)
		case own[name]:
			return fmt.Errorf("snippet variable %s: set by the runner itself", name)
		case seen[name]:
			return fmt.Errorf("snippet variable %s given twice", name)
		}
		seen[name] = true
	}
	return nil
}
