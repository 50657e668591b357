package exec

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultPreload is what the sandbox image's pre-started python3 imports
// while it waits: the data stack its snippets use most (pandas and a chart
// saved with matplotlib), so that their imports cost nothing at the job.
// matplotlib.pyplot brings matplotlib, its font list and the backend that
// MPLBACKEND names (Agg in the image).
const DefaultPreload = "numpy,pandas,matplotlib.pyplot"

// PreloadIdleWindow is the window the runner's preload measures before
// each step: long enough for a hundred clock ticks a second to count, short
// enough to add little to a preload of six steps.
const PreloadIdleWindow = 100 * time.Millisecond

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

// Warm-up steps: what a preloaded interpreter runs after its imports, so
// that a snippet's first frame, describe() and PNG cost what its second
// would. Importing a module is not the whole of its first use: matplotlib
// imports its Agg backend, sets up its first figure, lays out its first
// glyphs and loads Pillow's image plugins only when it draws and saves;
// pandas imports its formatters at the first frame it prints and its
// plotting backend at the first plot. The snippet paid all of that in
// every run (docs/speed.md). Each step is fixed code (never from an
// option), begins with a comment that tells the preamble it is one, runs
// in globals of its own that are dropped with everything it made, writes
// nothing to a file, uses no shared random state and closes what it
// opened; the last collects the garbage they left. Like a module, a step
// runs only if the job has not begun to arrive, and one that fails is
// skipped silently (its module is reported missing already). What they
// leave a snippet to see is in docs/runner.md, and TestPreloadedIsFresh
// holds them to it.
const (
	warmPandas = `# warm-up: pandas
import pandas as pd
f = pd.DataFrame({'x': [1, 2, 3], 'y': [0.5, 1.5, 2.5]})
str(f.describe())
`
	// warmPyplot draws with pyplot alone, when pandas is not preloaded.
	warmPyplot = `# warm-up: matplotlib.pyplot
import io, matplotlib.pyplot as plt
plt.plot([1, 2, 3], [0.5, 1.5, 2.5])
plt.title('warm-up')
plt.savefig(io.BytesIO(), format='png')
plt.close('all')
` + warmCloseFonts
	// warmPandasPlot draws through pandas, which also imports its
	// matplotlib plotting backend.
	warmPandasPlot = `# warm-up: pandas plot
import io, pandas as pd, matplotlib.pyplot as plt
pd.DataFrame({'x': [1, 2, 3], 'y': [0.5, 1.5, 2.5]}).plot(x='x', y='y', title='warm-up')
plt.savefig(io.BytesIO(), format='png')
plt.close('all')
` + warmCloseFonts
	// warmCloseFonts closes the font files that drawing opened (matplotlib
	// keeps each open while its cache holds it), so that the snippet has no
	// descriptor beyond 0 to 2; it opens them again when it draws, a
	// millisecond or two.
	warmCloseFonts = `import matplotlib.font_manager as fm
fm._get_font.cache_clear()
`
	warmCollect = `# warm-up: collect
import gc
gc.collect()
`
)

// warmUpSteps returns the warm-up steps for a preload: those whose modules
// it names, and a collection after them; none without such a module.
func warmUpSteps(preload []string) []string {
	has := func(m string) bool { return slices.Contains(preload, m) }
	var steps []string
	if has("pandas") {
		steps = append(steps, warmPandas)
	}
	switch {
	case has("matplotlib.pyplot") && has("pandas"):
		steps = append(steps, warmPandasPlot)
	case has("matplotlib.pyplot"):
		steps = append(steps, warmPyplot)
	}
	if len(steps) > 0 {
		steps = append(steps, warmCollect)
	}
	return steps
}

// PreloadModulesScript is Python source that does in a bare python3 what
// a preload does (imports preload, then runs its warm-up steps, each
// failure skipped) and prints the sorted list of the modules that added to
// sys.modules: what a preloaded interpreter may show a snippet beyond a
// fresh one's (TestPreloadedIsFresh, and the e2e suite on kind).
func PreloadModulesScript(preload []string) string {
	return fmt.Sprintf(`import sys
b = set(sys.modules)
for m in %s:
    try:
        __import__(m)
    except BaseException:
        pass
for w in %s:
    try:
        exec(w, {})
    except BaseException:
        pass
print(sorted(set(sys.modules) - b))
`, pyTuple(preload), pyTuple(warmUpSteps(preload)))
}

// pyTuple is names as a Python tuple of strings: module names (checked by
// Prestart) and warm-up steps (fixed code), quoted as Go quotes ASCII,
// which Python reads alike.
func pyTuple(names []string) string {
	var t strings.Builder
	t.WriteString("(")
	for _, n := range names {
		t.WriteString(strconv.QuoteToASCII(n) + ", ")
	}
	t.WriteString(")")
	return t.String()
}
