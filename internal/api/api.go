// Package api is the service's side of the HTTP API, shared by serve and the
// in-pod runner: the limits of a request, its validation into an exec.Job or
// a Call, the deployment's call policy, and the answers (an *Error, a JSON
// body). The JSON itself is package wire's.
package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Limits of a request, as docs/api.md promises them.
const (
	// DefaultTimeoutS is the snippet timeout when a request names none:
	// exec's default, in the whole seconds of timeout_s.
	DefaultTimeoutS = int(exec.DefaultTimeout / time.Second)
	// MaxTimeoutS is the longest a snippet may run.
	MaxTimeoutS = 60
	// DefaultMaxBody bounds a request body (1 MiB) so a client cannot make
	// the service buffer arbitrary amounts of memory.
	DefaultMaxBody = 1 << 20
	// MaxForwardedBody bounds what serve forwards to a runner: the
	// caller's body, at most DefaultMaxBody, as serve encodes it again,
	// which can grow it (U+2028 in a string, three bytes, becomes six;
	// serve fills in timeout_s). Twice the caller's limit holds any string
	// doubled; the limit applies once, to what the caller sent.
	MaxForwardedBody = 2 * DefaultMaxBody
	// MaxResultBytes bounds a result's JSON, as a reader of a runner's
	// answer allows it (about 38 MiB): both streams at JSON's worst (six
	// bytes a byte), the output files' content at its worst (twice, see
	// wire.EncodeContent), and a full listing of the longest paths.
	MaxResultBytes = 2*6*exec.DefaultMaxOutput + 2*exec.MaxOutputBytes +
		exec.MaxOutputEntries*(6*wire.MaxPathLen+128) + 64<<10
)

// Error is an error that carries the HTTP status it should be answered with.
// Backends return it to choose a status other than 500.
type Error struct {
	Status int
	Msg    string
	// RetryAfter, when set, becomes the Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Msg }

// Errorf returns an *Error with the given status.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// ErrNoCapacity is the answer when no sandbox could be had in time.
var ErrNoCapacity = &Error{
	Status:     http.StatusServiceUnavailable,
	Msg:        "no warm sandbox pod available, try again shortly",
	RetryAfter: 5 * time.Second,
}
