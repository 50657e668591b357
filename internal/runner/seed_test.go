//go:build linux

package runner

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSeedTmp(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "matplotlib", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "matplotlib", "fontlist-v330.json"), []byte("{}"), 0o444)
	for range 2 { // again: what is in place stays
		if err := SeedTmp(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dst, "matplotlib", "fontlist-v330.json")
	if to, err := os.Readlink(link); err != nil || to != filepath.Join(src, "matplotlib", "fontlist-v330.json") {
		t.Errorf("link %q, %v", to, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "matplotlib", "sub")); err != nil || !fi.IsDir() {
		t.Errorf("sub: %v", err)
	}
	os.Remove(link)
	os.WriteFile(link, []byte("other"), 0o644)
	if err := SeedTmp(src, dst); err == nil {
		t.Error("a different file in the way was accepted")
	}
}

func TestCheckSnippetEnv(t *testing.T) {
	if err := CheckSnippetEnv([]string{"MPLBACKEND=Agg", "MPLCONFIGDIR=/tmp/matplotlib", "EMPTY="}); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{{"HOME=/root"}, {"PATH=/x"}, {"A=1", "A=2"}, {"NOEQUALS"}, {"1X=1"}, {"=x"}} {
		if err := CheckSnippetEnv(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
