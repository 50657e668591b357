package exec

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/wire"
)

// Reading a run's files out.
//
// The working directory is the run's: whatever the snippet left there may
// be a symlink to /etc/shadow or to another run's files, a FIFO that blocks
// whoever opens it, a tree a thousand levels deep, or a million files; and
// the collector may be more privileged than the run (serve is root in the
// local backend). So the walk never resolves a path. It holds a descriptor
// of each directory and opens each entry relative to it, by its one name,
// with O_NOFOLLOW (a symlink fails instead of being followed) and
// O_NONBLOCK (a FIFO opens at once instead of waiting for a writer), then
// asks the descriptor with fstat what it really got and reads only regular
// files. Symlinks, FIFOs, sockets and devices are listed as skipped and
// never read; a device is not even opened. An entry swapped for something
// else between the listing and the open is judged by what was opened, so a
// race changes nothing. Where the collector has more rights than the run,
// only files the run owns are read (a hard link to a file of someone else's
// is skipped). The walk's work is bounded: its depth, the entries it reads,
// the files it lists and the bytes it reads (the constants in outputs.go).

// Why a matching entry was not read, as wire.OutputFile.Skipped says it.
const (
	skipSymlink   = "symlink"
	skipFIFO      = "fifo"
	skipSocket    = "socket"
	skipDevice    = "device"
	skipDirectory = "directory"
	skipNotOwned  = "not the run's own file"
	skipChanged   = "changed while being read"
	skipBadName   = "name is not valid UTF-8"
)

// collectHook, when set, runs at each step of the walk ("open" before an
// entry is opened, "read" after a file is opened and checked, before it is
// read): the tests' way to change the tree at the worst moment.
var collectHook func(stage string, dirfd int, name string)

// CollectOutputs returns the files under dir that match patterns (each
// valid by ValidatePattern), in a stable order: each directory's entries
// sorted by name, a directory's contents where its name falls. incomplete
// says that some match is not in files with its content (omitted, or past
// the bounds). owner, when not negative, is the run's uid: a file owned by
// anyone else is skipped rather than read. dir stays open; every process
// that could write to it should be dead.
func CollectOutputs(dir *os.File, patterns []string, owner int) (files []wire.OutputFile, incomplete bool) {
	if len(patterns) == 0 {
		return nil, false
	}
	c := &collector{m: newMatcher(patterns), owner: owner}
	if _, err := syscall.Seek(int(dir.Fd()), 0, 0); err != nil {
		return nil, true
	}
	c.walk(int(dir.Fd()), "", 0, c.m.start())
	return c.files, c.incomplete
}

type collector struct {
	m          *matcher
	owner      int
	files      []wire.OutputFile
	incomplete bool
	withData   int   // files with content so far
	bytes      int64 // their total size
	scanned    int   // directory entries read so far
}

// dirent is one directory entry as getdents64 reports it.
type dirent struct {
	name string
	typ  uint8 // DT_*
}

// Directory entry types from <dirent.h>.
const (
	dtUnknown = 0
	dtFIFO    = 1
	dtChr     = 2
	dtDir     = 4
	dtBlk     = 6
	dtReg     = 8
	dtLnk     = 10
	dtSock    = 12
)

// walk visits the directory open at fd, whose path is rel, with the
// matcher's states for its entries.
func (c *collector) walk(fd int, rel string, depth int, states []mstate) {
	entries, err := c.list(fd)
	if err != nil {
		c.incomplete = true
		if rel != "" {
			c.skip(rel, "unreadable: "+errText(err))
		}
	}
	for _, e := range entries {
		if c.full() {
			c.incomplete = true
			return
		}
		match, named, next := c.m.step(states, e.name)
		if !match && len(next) == 0 {
			continue
		}
		p := e.name
		if rel != "" {
			p = rel + "/" + e.name
		}
		if !utf8.ValidString(e.name) {
			// A path that JSON cannot carry is no path a client can use.
			c.skip(strings.ToValidUTF8(p, "\uFFFD"), skipBadName)
			continue
		}
		c.entry(fd, p, e, depth, match, named, next)
	}
}

// entry handles one entry of the directory open at dirfd.
func (c *collector) entry(dirfd int, p string, e dirent, depth int, match, named bool, next []mstate) {
	typ := e.typ
	if typ == dtUnknown {
		// Some file systems leave the type to a stat: one that does not
		// follow a symlink, on the directory's descriptor.
		var st syscall.Stat_t
		if err := fstatat(dirfd, e.name, &st); err != nil {
			return // gone since the listing
		}
		typ = direntType(st.Mode)
	}
	switch typ {
	case dtLnk:
		c.skip(p, skipSymlink) // whether it matched or a pattern would go through it
		return
	case dtReg, dtDir:
	default:
		if match {
			c.skip(p, skipKind(typ))
		}
		return
	}
	if collectHook != nil {
		collectHook("open", dirfd, e.name)
	}
	fd, err := syscall.Openat(dirfd, e.name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|
		syscall.O_CLOEXEC|syscall.O_NOCTTY, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		c.skip(p, skipSymlink) // swapped in since the listing
		return
	case errors.Is(err, syscall.ENXIO):
		if match {
			c.skip(p, skipSocket)
		}
		return
	case errors.Is(err, syscall.ENOENT):
		return // gone since the listing
	case err != nil:
		if match {
			c.skip(p, "unreadable: "+errText(err))
		}
		return
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		if match {
			c.skip(p, "unreadable: "+errText(err))
		}
		return
	}
	switch t := direntType(st.Mode); {
	case t == dtDir:
		if named {
			c.skip(p, skipDirectory)
		}
		if len(next) == 0 {
			return
		}
		if depth+1 > maxOutputDepth || len(p) >= wire.MaxPathLen {
			c.incomplete = true
			return
		}
		c.walk(fd, p, depth+1, next)
	case !match:
	case t == dtReg:
		c.file(fd, p, &st)
	default:
		c.skip(p, skipKind(t))
	}
}

// file reads the regular file open at fd, or lists it as omitted when the
// bounds have no room for it.
func (c *collector) file(fd int, p string, st *syscall.Stat_t) {
	if c.owner >= 0 && st.Uid != uint32(c.owner) {
		c.skip(p, skipNotOwned)
		return
	}
	size := st.Size
	if c.withData >= MaxOutputFiles || c.bytes+size > MaxOutputBytes {
		c.incomplete = true
		c.add(wire.OutputFile{Path: p, Size: size, Omitted: true})
		return
	}
	if collectHook != nil {
		collectHook("read", fd, "")
	}
	b, err := readExactly(fd, size)
	if err != nil {
		c.skip(p, "unreadable: "+errText(err))
		return
	}
	var after syscall.Stat_t
	if b == nil || syscall.Fstat(fd, &after) != nil || after.Size != st.Size || after.Mtim != st.Mtim {
		// Something still writes to it: what was read is no file that
		// ever existed whole.
		c.skip(p, skipChanged)
		return
	}
	content, enc := wire.EncodeContent(b)
	if c.add(wire.OutputFile{Path: p, Size: size, Content: content, Encoding: enc}) {
		c.withData++
		c.bytes += size
	}
}

// readExactly reads size bytes from the start of fd. It returns nil, no
// error, when the file turns out shorter or longer than that.
func readExactly(fd int, size int64) ([]byte, error) {
	b := make([]byte, size)
	for off := 0; off < len(b); {
		n, err := syscall.Pread(fd, b[off:], int64(off))
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return nil, nil // shorter
		}
		off += n
	}
	var one [1]byte
	for {
		n, err := syscall.Pread(fd, one[:], size)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, nil // longer
		}
		return b, nil
	}
}

// full reports whether the listing has reached MaxOutputEntries.
func (c *collector) full() bool { return len(c.files) >= MaxOutputEntries }

// add lists f if there is room, and reports whether there was.
func (c *collector) add(f wire.OutputFile) bool {
	if c.full() {
		c.incomplete = true
		return false
	}
	c.files = append(c.files, f)
	return true
}

func (c *collector) skip(p, why string) { c.add(wire.OutputFile{Path: p, Skipped: why}) }

// list reads the entries of the directory open at fd, sorted by name,
// within what is left of maxOutputScan.
func (c *collector) list(fd int) ([]dirent, error) {
	var out []dirent
	buf := make([]byte, 32<<10)
	for {
		n, err := syscall.Getdents(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return out, err
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return out, syscall.EIO
			}
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				if c.scanned++; c.scanned > maxOutputScan {
					c.incomplete = true
					slices.SortFunc(out, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
					return out, nil
				}
				out = append(out, dirent{name: s, typ: b[18]})
			}
			b = b[reclen:]
		}
	}
	slices.SortFunc(out, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func direntType(mode uint32) uint8 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return dtReg
	case syscall.S_IFDIR:
		return dtDir
	case syscall.S_IFLNK:
		return dtLnk
	case syscall.S_IFIFO:
		return dtFIFO
	case syscall.S_IFSOCK:
		return dtSock
	case syscall.S_IFCHR:
		return dtChr
	case syscall.S_IFBLK:
		return dtBlk
	}
	return dtUnknown
}

func skipKind(typ uint8) string {
	switch typ {
	case dtFIFO:
		return skipFIFO
	case dtSock:
		return skipSocket
	case dtChr, dtBlk:
		return skipDevice
	case dtLnk:
		return skipSymlink
	case dtDir:
		return skipDirectory
	}
	return "not a regular file"
}

// fstatat stats name in the directory open at dirfd without following a
// symlink, and without opening the file itself: an O_PATH descriptor
// neither blocks on a FIFO nor wakes a device.
func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	fd, err := syscall.Openat(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Fstat(fd, st)
}

// oPath is O_PATH, which package syscall lacks on some architectures; the
// same number on x86 and arm.
const oPath = 0x200000

// errText is an errno's text without Go's wrapping.
func errText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// outputs collects the run's files matching patterns once every process
// of it is dead: an isolated run's from the descriptor of its working
// directory that its init handed over (the tmpfs outlives the run's mount
// namespace while it is open, and no path of the host leads there), any
// other run's from its directory.
func (c *child) outputs(opts Options, patterns []string) ([]wire.OutputFile, bool) {
	if c.sb != nil {
		if c.sb.workDir == nil {
			return nil, true
		}
		return CollectOutputs(c.sb.workDir, patterns, int(opts.Sandbox.UID))
	}
	d, err := os.OpenFile(opts.Dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, true
	}
	defer d.Close()
	owner := -1
	if opts.Credential != nil {
		owner = int(opts.Credential.Uid)
	}
	return CollectOutputs(d, patterns, owner)
}
