package modes

import "errors"

// ExecCmd is a placeholder until its issue lands.
type ExecCmd struct{}

// Run reports that the mode is not built yet.
func (c *ExecCmd) Run(d *Deps) error { return errors.New("exec: not implemented yet") }
