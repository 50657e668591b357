package local

// Busy is how many execution slots are in use, for package local_test.
func (b *Backend) Busy() int64 { return b.busy.Load() }
