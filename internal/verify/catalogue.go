package verify

import _ "embed"

// Catalogue is CHECKS.md: one row per check, what it proves and how it can
// fail. `sandbox verify --list` prints it; TestCatalogueCoversChecks keeps
// it complete.
//
//go:embed CHECKS.md
var Catalogue string
