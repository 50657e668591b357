package wire

import (
	"path/filepath"
	"strings"
	"testing"
)

var pathCases = []struct {
	path string
	ok   bool
}{
	{"main.py", true},
	{"data/in.csv", true},
	{"a/b/c/d.txt", true},
	{".hidden", true},
	{"..dots", true},
	{"", false},
	{"/etc/passwd", false},
	{"../x", false},
	{"a/../../x", false},
	{"a/..", false},
	{"./a", false},
	{"a//b", false},
	{"a/", false},
	{"a\x00b", false},
	{strings.Repeat("n", MaxNameLen), true},
	{strings.Repeat("n", MaxNameLen+1), false},
	{strings.Repeat("d/", MaxPathLen/2-1) + "ff", true},
	{strings.Repeat("d/", MaxPathLen/2) + "f", false},
}

func TestValidatePath(t *testing.T) {
	for _, tt := range pathCases {
		if err := ValidatePath(tt.path); (err == nil) != tt.ok {
			t.Errorf("ValidatePath(%q) = %v, want ok=%v", tt.path, err, tt.ok)
		}
	}
}

// FuzzValidatePath checks that every accepted path is local and clean, so
// that joining it to the working directory cannot leave it. The seed corpus
// runs in plain go test.
func FuzzValidatePath(f *testing.F) {
	for _, tt := range pathCases {
		f.Add(tt.path)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePath(p) != nil {
			return
		}
		if !filepath.IsLocal(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) || len(p) > MaxPathLen {
			t.Errorf("ValidatePath accepted %q", p)
		}
		for _, c := range strings.Split(p, "/") {
			if len(c) == 0 || len(c) > MaxNameLen {
				t.Errorf("ValidatePath accepted %q with component %q", p, c)
			}
		}
		if dir := "/work"; !strings.HasPrefix(filepath.Join(dir, p), dir+"/") {
			t.Errorf("%q leaves %s", p, dir)
		}
	})
}
