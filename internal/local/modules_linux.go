package local

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
)

// probeTimeout bounds the start-up probe of the interpreter's modules: one
// short run, seconds on the slowest machine.
const probeTimeout = 30 * time.Second

// MissingModules runs one probe as a run like any other (the same python3,
// isolation and limits) and returns the modules (exec.ParsePreload names)
// whose top-level package that python3 cannot find: what a snippet here
// would fail to import.
func (b *Backend) MissingModules(ctx context.Context, modules []string) ([]string, error) {
	if len(modules) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	code := fmt.Sprintf("import importlib.util as u\nfor m in %q.split(','):\n    if u.find_spec(m.split('.')[0]) is None:\n        print(m)\n",
		strings.Join(modules, ","))
	res, err := b.run(ctx, exec.Job{Code: code, Timeout: probeTimeout}, b.iso)
	if err != nil {
		return nil, fmt.Errorf("probe python3's modules: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("probe python3's modules: exit %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))
	}
	return strings.Fields(res.Stdout), nil
}

// InstallHint says how to get modules a python3 lacks: Debian's packages
// of their top-level names (python3-numpy, ...), or another interpreter.
func InstallHint(missing []string) string {
	var pkgs []string
	for _, m := range missing {
		p := "python3-" + strings.ToLower(strings.SplitN(m, ".", 2)[0])
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	return "apt-get install " + strings.Join(pkgs, " ") + ", or serve with --python the python3 of a venv that has them"
}
