package verify

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCatalogueCoversChecks finds every check name the code reports and
// wants a row of CHECKS.md for it, and no row for a check that is gone.
func TestCatalogueCoversChecks(t *testing.T) {
	inDoc := map[string]bool{}
	for _, line := range strings.Split(Catalogue, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "/") {
			continue
		}
		for _, name := range strings.Split(cells[1], ",") {
			inDoc[strings.TrimSpace(name)] = true
		}
	}
	nameRE := regexp.MustCompile(`"((?:lifecycle|posture|inside|network|runner|rbac|auth|toolcalls)/[a-z0-9-]+)"`)
	files, _ := filepath.Glob("*.go")
	inCode := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range nameRE.FindAllSubmatch(src, -1) {
			inCode[string(m[1])] = true
		}
	}
	if len(inCode) < 30 {
		t.Fatalf("found only %d check names in the code: the pattern is stale", len(inCode))
	}
	for name := range inCode {
		if !inDoc[name] {
			t.Errorf("check %s has no row in CHECKS.md", name)
		}
	}
	for name := range inDoc {
		if !inCode[name] {
			t.Errorf("CHECKS.md has a row for %s, which no code reports", name)
		}
	}
}
