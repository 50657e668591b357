package modes

import "errors"

// ManifestsCmd is a placeholder until its issue lands.
type ManifestsCmd struct{}

// Run reports that the mode is not built yet.
func (c *ManifestsCmd) Run(d *Deps) error { return errors.New("manifests: not implemented yet") }
