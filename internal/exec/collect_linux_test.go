package exec

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// collectDir runs CollectOutputs on dir, failing the test if it takes more
// than a few seconds: nothing a run leaves may make the collector block.
func collectDir(t *testing.T, dir string, patterns []string, owner int) ([]wire.OutputFile, bool) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type answer struct {
		files      []wire.OutputFile
		incomplete bool
	}
	done := make(chan answer, 1)
	go func() {
		f, inc := CollectOutputs(d, patterns, owner)
		done <- answer{f, inc}
	}()
	select {
	case a := <-done:
		return a.files, a.incomplete
	case <-time.After(20 * time.Second):
		t.Fatal("CollectOutputs blocked")
		return nil, false
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// byPath indexes a listing, failing on a path listed twice.
func byPath(t *testing.T, files []wire.OutputFile) map[string]wire.OutputFile {
	t.Helper()
	m := map[string]wire.OutputFile{}
	for _, f := range files {
		if _, dup := m[f.Path]; dup {
			t.Fatalf("%q listed twice", f.Path)
		}
		m[f.Path] = f
	}
	return m
}

func paths(files []wire.OutputFile) []string {
	var ps []string
	for _, f := range files {
		ps = append(ps, f.Path)
	}
	return ps
}

// hostSecret is a file outside the working directory that only root may
// read, standing for /etc/shadow or another run's data.
func hostSecret(t *testing.T) (path, content string) {
	t.Helper()
	content = "host-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	path = filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

// noSecret fails the test when any listed content holds secret.
func noSecret(t *testing.T, files []wire.OutputFile, secret string) {
	t.Helper()
	for _, f := range files {
		if b, err := f.Bytes(); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s: the collector read the secret", f.Path)
		}
	}
}

func TestCollectOutputs(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/b.txt", "text <b>\n")
	write(t, dir+"/a.bin", "\x00\xff")
	write(t, dir+"/out/z.csv", "z\n")
	write(t, dir+"/out/d/y.csv", "y\n")
	write(t, dir+"/out.csv", "top\n")
	write(t, dir+"/empty.txt", "")
	files, incomplete := collectDir(t, dir, []string{"*.txt", "*.bin", "out/**"}, -1)
	if incomplete {
		t.Error("incomplete")
	}
	want := []string{"a.bin", "b.txt", "empty.txt", "out/d/y.csv", "out/z.csv"}
	if got := paths(files); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listed %q, want %q (sorted, each directory where its name falls)", got, want)
	}
	m := byPath(t, files)
	if f := m["a.bin"]; f.Encoding != wire.EncodingBase64 || f.Content != "AP8=" || f.Size != 2 {
		t.Errorf("a.bin: %+v", f)
	}
	if f := m["b.txt"]; f.Encoding != wire.EncodingUTF8 || f.Content != "text <b>\n" || f.Size != 9 {
		t.Errorf("b.txt: %+v", f)
	}
	if f := m["empty.txt"]; f.Encoding != wire.EncodingUTF8 || f.Content != "" || f.Omitted || f.Skipped != "" {
		t.Errorf("empty.txt: %+v", f)
	}
	// A directory named by a pattern's last component is said to be one.
	files, _ = collectDir(t, dir, []string{"*"}, -1)
	if f := byPath(t, files)["out"]; f.Skipped != skipDirectory {
		t.Errorf("out with *: %+v", f)
	}
	if files, inc := collectDir(t, dir, []string{"nothing/*"}, -1); len(files) != 0 || inc {
		t.Errorf("no match: %+v, incomplete %v", files, inc)
	}
}

// TestCollectSymlinks: symlinks the run planted, to a file only root may
// read and to a directory outside, are listed as symlinks and never
// followed. The control is a naive collector that reads the matching
// paths: it hands out the secret.
func TestCollectSymlinks(t *testing.T) {
	secret, content := hostSecret(t)
	dir := t.TempDir()
	write(t, dir+"/ok.txt", "ok")
	for name, target := range map[string]string{
		"leak.txt":   secret,
		"rel.txt":    "../" + filepath.Base(filepath.Dir(secret)) + "/secret",
		"shadow.txt": "/etc/shadow",
		"out":        filepath.Dir(secret),
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The control: the path-based way reads what the link points at.
	if b, err := os.ReadFile(filepath.Join(dir, "leak.txt")); err != nil || string(b) != content {
		t.Fatalf("control: reading leak.txt by path gave %q, %v; the attack does not work here", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "secret")); err != nil || string(b) != content {
		t.Fatalf("control: reading out/secret by path gave %q, %v", b, err)
	}
	files, _ := collectDir(t, dir, []string{"*.txt", "out/*", "**"}, -1)
	noSecret(t, files, content)
	m := byPath(t, files)
	for _, name := range []string{"leak.txt", "rel.txt", "shadow.txt", "out"} {
		if f := m[name]; f.Skipped != skipSymlink {
			t.Errorf("%s: %+v, want skipped as a symlink", name, f)
		}
	}
	if m["ok.txt"].Content != "ok" {
		t.Errorf("ok.txt: %+v", m["ok.txt"])
	}
	if _, ok := m["out/secret"]; ok {
		t.Error("the walk went through the symlinked directory")
	}
}

// TestCollectSwapRace: a file, and a directory, swapped for symlinks
// between the listing and the open (the worst moment, forced by the hook)
// are caught at the open. The control reads the same path at that moment
// and gets the secret.
func TestCollectSwapRace(t *testing.T) {
	secret, content := hostSecret(t)
	dir := t.TempDir()
	write(t, dir+"/data.txt", "harmless")
	write(t, dir+"/out/a.txt", "harmless")
	var naive []string
	collectHook = func(stage string, _ int, name string) {
		if stage != "open" {
			return
		}
		switch name {
		case "data.txt":
			os.Remove(filepath.Join(dir, name))
			if err := os.Symlink(secret, filepath.Join(dir, name)); err != nil {
				t.Error(err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, name))
			naive = append(naive, string(b))
		case "out":
			os.RemoveAll(filepath.Join(dir, name))
			if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, name)); err != nil {
				t.Error(err)
			}
			b, _ := os.ReadFile(filepath.Join(dir, name, "secret"))
			naive = append(naive, string(b))
		}
	}
	defer func() { collectHook = nil }()
	files, _ := collectDir(t, dir, []string{"*.txt", "out/**"}, -1)
	if fmt.Sprint(naive) != fmt.Sprint([]string{content, content}) {
		t.Fatalf("control: a path-based read after the swap gave %q; the race does not work here", naive)
	}
	noSecret(t, files, content)
	m := byPath(t, files)
	for _, name := range []string{"data.txt", "out"} {
		if f := m[name]; f.Skipped != skipSymlink {
			t.Errorf("%s: %+v, want skipped as a symlink", name, f)
		}
	}
}

// TestCollectSpecialFiles: a FIFO (which would block a plain open for ever,
// the control), a socket and a device are listed as skipped, never read,
// and the collector does not block.
func TestCollectSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/ok.txt", "ok")
	fifo := filepath.Join(dir, "pipe.txt")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := map[string]string{"pipe.txt": skipFIFO, "sock.txt": skipSocket}
	if os.Geteuid() == 0 {
		// /dev/null's numbers: harmless if it were opened, but it is not read.
		if err := syscall.Mknod(filepath.Join(dir, "dev.txt"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		want["dev.txt"] = skipDevice
	}

	// The control: a plain open of the FIFO waits for a writer.
	opened := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo)
		if err == nil {
			f.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("control: a plain open of the FIFO returned at once (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0) // lets the control go
	if err != nil {
		t.Fatal(err)
	}
	<-opened
	w.Close()

	files, _ := collectDir(t, dir, []string{"*.txt"}, -1)
	m := byPath(t, files)
	for name, why := range want {
		if f := m[name]; f.Skipped != why {
			t.Errorf("%s: %+v, want skipped %q", name, f, why)
		}
	}
	if m["ok.txt"].Content != "ok" {
		t.Errorf("ok.txt: %+v", m["ok.txt"])
	}
}

// TestCollectOwner: where the collector may read more than the run (root
// collecting a run of another uid), a hard link the run made to a file it
// cannot read is skipped. The control collects without the owner check and
// reads the secret.
func TestCollectOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the run's files to another uid")
	}
	const runUID = 2_000_000_002
	secret, content := hostSecret(t)
	dir := filepath.Join(filepath.Dir(secret), "work") // same file system: links allowed
	write(t, dir+"/mine.txt", "mine")
	if err := os.Chown(dir+"/mine.txt", runUID, runUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, dir+"/linked.txt"); err != nil {
		t.Fatal(err)
	}
	control, _ := collectDir(t, dir, []string{"*.txt"}, -1)
	if byPath(t, control)["linked.txt"].Content != content {
		t.Fatalf("control: without the owner check the link was not read: %+v", control)
	}
	files, _ := collectDir(t, dir, []string{"*.txt"}, runUID)
	noSecret(t, files, content)
	m := byPath(t, files)
	if f := m["linked.txt"]; f.Skipped != skipNotOwned {
		t.Errorf("linked.txt: %+v", f)
	}
	if m["mine.txt"].Content != "mine" {
		t.Errorf("mine.txt: %+v", m["mine.txt"])
	}
}

// TestCollectChangingFile: a file that something still writes while it is
// read is skipped, never returned half-written.
func TestCollectChangingFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/grow.log", "first line\n")
	write(t, dir+"/still.log", "still\n")
	collectHook = func(stage string, fd int, _ string) {
		var st syscall.Stat_t
		if stage == "read" && syscall.Fstat(fd, &st) == nil && st.Size == int64(len("first line\n")) {
			f, err := os.OpenFile(dir+"/grow.log", os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			f.WriteString("second line\n")
			f.Close()
		}
	}
	defer func() { collectHook = nil }()
	files, _ := collectDir(t, dir, []string{"*.log"}, -1)
	m := byPath(t, files)
	if f := m["grow.log"]; f.Skipped != skipChanged {
		t.Errorf("grow.log: %+v, want skipped as changed", f)
	}
	if m["still.log"].Content != "still\n" {
		t.Errorf("still.log: %+v", m["still.log"])
	}
}

// TestCollectBounds: past MaxOutputFiles files or MaxOutputBytes bytes the
// rest is listed as omitted, with its size and unread (a huge sparse file
// costs nothing), and the answer says it is incomplete; a smaller file
// after a large one still fits.
func TestCollectBounds(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxOutputFiles + 20 {
		write(t, fmt.Sprintf("%s/many/f%03d.txt", dir, i), "x")
	}
	files, incomplete := collectDir(t, dir, []string{"many/*"}, -1)
	if !incomplete || len(files) != MaxOutputFiles+20 {
		t.Fatalf("%d listed, incomplete %v", len(files), incomplete)
	}
	for i, f := range files {
		if (i < MaxOutputFiles) == f.Omitted || (f.Omitted && (f.Size != 1 || f.Content != "")) {
			t.Fatalf("file %d: %+v", i, f)
		}
	}

	big := strings.Repeat("b", 4<<20)
	write(t, dir+"/sized/1.dat", big)
	write(t, dir+"/sized/2.dat", big)
	write(t, dir+"/sized/3.dat", big)
	write(t, dir+"/sized/4.dat", "small")
	f, err := os.Create(dir + "/sized/5-huge.dat")
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 40) // sparse: a tebibyte nobody reads
	f.Close()
	start := time.Now()
	files, incomplete = collectDir(t, dir, []string{"sized/*"}, -1)
	took := time.Since(start)
	var got []string
	for _, f := range files {
		got = append(got, fmt.Sprintf("%s:%d:%v", f.Path, f.Size, f.Omitted))
	}
	want := []string{"sized/1.dat:4194304:false", "sized/2.dat:4194304:false", "sized/3.dat:4194304:true",
		"sized/4.dat:5:false", "sized/5-huge.dat:1099511627776:true"}
	if fmt.Sprint(got) != fmt.Sprint(want) || !incomplete {
		t.Errorf("got %q (incomplete %v), want %q", got, incomplete, want)
	}
	if took > 5*time.Second {
		t.Errorf("took %s: the huge file was read?", took)
	}

	// Past MaxOutputEntries nothing more is even named.
	for i := range MaxOutputEntries + 10 {
		write(t, fmt.Sprintf("%s/lots/f%04d", dir, i), "")
	}
	files, incomplete = collectDir(t, dir, []string{"lots/*"}, -1)
	if len(files) != MaxOutputEntries || !incomplete {
		t.Errorf("%d listed (incomplete %v), want %d", len(files), incomplete, MaxOutputEntries)
	}
}

// TestCollectDeepTree: a tree far deeper than maxOutputDepth ends the walk
// at that depth, incomplete, and quickly.
func TestCollectDeepTree(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Made relative to descriptors, as a snippet would: the full path is
	// longer than PATH_MAX.
	fd := int(d.Fd())
	for i := range 300 {
		if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := syscall.Openat(fd, "d", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			syscall.Close(fd)
		}
		fd = next
		if i == 2 {
			write(t, dir+"/d/d/d/shallow.txt", "s")
		}
	}
	syscall.Close(fd)
	d.Close()
	files, incomplete := collectDir(t, dir, []string{"**"}, -1)
	if !incomplete {
		t.Error("a 300-level tree walked as complete")
	}
	if m := byPath(t, files); m["d/d/d/shallow.txt"].Content != "s" {
		t.Errorf("listing %q", paths(files))
	}
}
