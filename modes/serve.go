package modes

import "errors"

// ServeCmd is a placeholder until its issue lands.
type ServeCmd struct{}

// Run reports that the mode is not built yet.
func (c *ServeCmd) Run(d *Deps) error { return errors.New("serve: not implemented yet") }
