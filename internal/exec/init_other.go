//go:build !linux

package exec

// MaybeInit returns false: off Linux nothing runs isolated (this package's
// running is in its _linux.go files), so this binary is never started again
// as a run's init. It is here so that main calls it the same way everywhere.
func MaybeInit() (isInit bool, status int) { return false, 0 }
