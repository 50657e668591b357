package exec

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultPreload is what the sandbox image's pre-started python3 imports
// while it waits: the data stack its snippets use most (pandas and a chart
// saved with matplotlib), so that their imports cost nothing at the job.
// matplotlib.pyplot brings matplotlib, its font list and the backend that
// MPLBACKEND names (Agg in the image).
const DefaultPreload = "numpy,pandas,matplotlib.pyplot"

// moduleName is a dotted Python module name. Only such names reach the
// preamble's source, so that a preload list cannot be code.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ParsePreload splits a comma-separated list of modules to preload
// (Options.Preload); blanks around names are dropped, and "" is none.
func ParsePreload(list string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !moduleName.MatchString(n) {
			return nil, fmt.Errorf("preload %q: not a module name", n)
		}
		names = append(names, n)
	}
	return names, nil
}
