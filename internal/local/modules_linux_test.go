package local

import (
	"slices"
	"testing"
)

// TestMissingModules: the probe, a run like any other, names exactly the
// modules the interpreter cannot find, by their full name.
func TestMissingModules(t *testing.T) {
	b := newBackend(t, Options{})
	got, err := b.MissingModules(t.Context(), []string{"json", "no_such_module_sandbox.sub", "email.mime"})
	if err != nil || !slices.Equal(got, []string{"no_such_module_sandbox.sub"}) {
		t.Errorf("MissingModules = %q, %v; want the one that does not exist", got, err)
	}
	if got, err := b.MissingModules(t.Context(), nil); got != nil || err != nil {
		t.Errorf("MissingModules(none) = %q, %v", got, err)
	}
}

func TestInstallHint(t *testing.T) {
	got := InstallHint([]string{"pandas", "matplotlib.pyplot", "matplotlib"})
	if want := "apt-get install python3-pandas python3-matplotlib, or serve with --python the python3 of a venv that has them"; got != want {
		t.Errorf("InstallHint = %q, want %q", got, want)
	}
}
