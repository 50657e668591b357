package modes

import "errors"

// RunCmd is a placeholder until its issue lands.
type RunCmd struct{}

// Run reports that the mode is not built yet.
func (c *RunCmd) Run(d *Deps) error { return errors.New("run: not implemented yet") }
