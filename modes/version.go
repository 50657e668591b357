package modes

import "errors"

// VersionCmd is a placeholder until its issue lands.
type VersionCmd struct{}

// Run reports that the mode is not built yet.
func (c *VersionCmd) Run(d *Deps) error { return errors.New("version: not implemented yet") }
