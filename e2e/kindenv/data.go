package kindenv

import "github.com/sandboxd/sandbox/internal/exec"

// DataSnippet is exec.DataSnippet, what a data agent sends; the bench's
// data phase and TestWarmPodsPreload run it.
const DataSnippet = exec.DataSnippet
