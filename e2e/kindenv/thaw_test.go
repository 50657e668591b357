package kindenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TestThawFrozen thaws the FROZEN and FREEZING cgroups of a stand-in
// freezer tree and leaves the others; a missing tree is no error.
func TestThawFrozen(t *testing.T) {
	dir := t.TempDir()
	states := map[string]string{"a": "FROZEN\n", "a/b": "THAWED\n", "c/d/e": "FREEZING\n", "f": "THAWED\n"}
	for sub, st := range states {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sub, "freezer.state"), []byte(st), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := thawFrozen(dir)
	if err != nil || n != 2 {
		t.Fatalf("thawed %d, err %v; want 2", n, err)
	}
	for sub := range states {
		b, _ := os.ReadFile(filepath.Join(dir, sub, "freezer.state"))
		if string(b) != "THAWED" && string(b) != "THAWED\n" {
			t.Errorf("%s: %q after the thaw", sub, b)
		}
	}
	if n, err := thawFrozen(filepath.Join(dir, "absent")); n != 0 || err != nil {
		t.Errorf("a missing tree: %d, %v", n, err)
	}
}
