package wire

import (
	"fmt"
	"strings"
)

// Bounds on a path on the wire (an input file's, an output file's, an
// output pattern's).
const (
	// MaxPathLen bounds a whole path: far above real use, and leaves room
	// under PATH_MAX (4096) for the working directory's own prefix.
	MaxPathLen = 1024
	// MaxNameLen is NAME_MAX, the kernel's limit on one path component.
	MaxNameLen = 255
)

// ValidatePath reports whether p may name a file of the working directory:
// a relative, slash-separated path that stays inside it. It rejects the
// empty path, absolute paths, "." and ".." components, empty components (a
// doubled or trailing slash), NUL bytes, and names over MaxNameLen or paths
// over MaxPathLen. Symlinks are checked where the file is written. The
// service checks input files by it and a client the output files it saves,
// whose paths come from the service.
func ValidatePath(p string) error {
	return CheckRelative(p, "file path", nil)
}

// CheckRelative holds the rules of ValidatePath for anything that names a
// place inside the working directory (noun says what, in messages); each,
// when not nil, checks every component further (exec's output patterns).
func CheckRelative(p, noun string, each func(c string) error) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is empty", noun)
	case len(p) > MaxPathLen:
		return fmt.Errorf("%s is %d bytes, over the limit of %d", noun, len(p), MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", noun, p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%s %q is absolute; paths are relative to the working directory", noun, p)
	}
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "":
			return fmt.Errorf("%s %q has an empty component", noun, p)
		case c == "." || c == "..":
			return fmt.Errorf("%s %q has a %q component", noun, p, c)
		case len(c) > MaxNameLen:
			return fmt.Errorf("%s %q has a component over %d bytes", noun, p, MaxNameLen)
		}
		if each != nil {
			if err := each(c); err != nil {
				return fmt.Errorf("%s %q: %w", noun, p, err)
			}
		}
	}
	return nil
}
