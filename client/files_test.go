package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/wire"
)

func text(p, content string) wire.OutputFile {
	return wire.OutputFile{Path: p, Size: int64(len(content)), Content: content, Encoding: wire.EncodingUTF8}
}

func TestSaveFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("old.txt", "old")
	saved, err := SaveFiles(dir, []wire.OutputFile{
		text("out/a/r.csv", "a,b\n"),
		{Path: "bin", Size: 2, Content: "AP8=", Encoding: wire.EncodingBase64},
		text("old.txt", "new"),
		{Path: "big", Size: 1 << 30, Omitted: true},
		{Path: "leak", Skipped: "symlink"},
	})
	if err != nil || strings.Join(saved, " ") != "out/a/r.csv bin old.txt" {
		t.Fatalf("saved %q, %v", saved, err)
	}
	for p, want := range map[string]string{"out/a/r.csv": "a,b\n", "bin": "\x00\xff", "old.txt": "new"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"big", "leak"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s written", p)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*", "*", ".sandbox-*")); len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
}

// TestSaveFilesHostile: paths a hostile or broken service might send never
// write outside the directory, and symlinks and hard links already in it
// are never written through. The control writes the same names the naive
// way (os.WriteFile on the joined path) and lands outside.
func TestSaveFilesHostile(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	linked := filepath.Join(outside, "linked")
	for _, p := range []string{victim, linked} {
		if err := os.WriteFile(p, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(linked, filepath.Join(dir, "hard.txt")); err != nil {
		t.Fatal(err)
	}
	files := []wire.OutputFile{
		text("../escape.txt", "x"), text("/tmp/abs.txt", "x"), text("a/../../b", "x"),
		text("link.txt", "through the symlink"), text("sub/victim", "through the directory"),
		text("hard.txt", "through the hard link"),
	}

	// The control, in a copy of the directory: naive writes land outside.
	ctl, ctlOut := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ctlOut, "victim"), []byte("precious"), 0o644)
	os.Symlink(filepath.Join(ctlOut, "victim"), filepath.Join(ctl, "link.txt"))
	os.WriteFile(filepath.Join(ctl, "link.txt"), []byte("through the symlink"), 0o644)
	if b, _ := os.ReadFile(filepath.Join(ctlOut, "victim")); string(b) != "through the symlink" {
		t.Fatalf("control: a naive write did not go through the symlink: %q", b)
	}

	saved, err := SaveFiles(dir, files)
	t.Logf("saved %q; errors: %v", saved, err)
	if err == nil {
		t.Error("no error for the paths that leave the directory")
	}
	for _, p := range []string{victim, linked} {
		if b, _ := os.ReadFile(p); string(b) != "precious" {
			t.Errorf("%s was overwritten: %q", p, b)
		}
	}
	for _, p := range []string{filepath.Join(filepath.Dir(dir), "escape.txt"), "/tmp/abs.txt", filepath.Join(filepath.Dir(dir), "b")} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s written outside the directory", p)
		}
	}
	// The symlink and the hard link were replaced by the files themselves.
	for p, want := range map[string]string{"link.txt": "through the symlink", "hard.txt": "through the hard link"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		b, _ := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !fi.Mode().IsRegular() || string(b) != want {
			t.Errorf("%s: %v %v %q", p, fi.Mode(), err, b)
		}
	}
}
