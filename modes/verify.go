package modes

import "errors"

// VerifyCmd is a placeholder until its issue lands.
type VerifyCmd struct{}

// Run reports that the mode is not built yet.
func (c *VerifyCmd) Run(d *Deps) error { return errors.New("verify: not implemented yet") }
