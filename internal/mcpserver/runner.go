package mcpserver

import (
	"context"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// OutputFunc receives a run's output while it runs: stream is "stdout" or
// "stderr", text what the snippet wrote since the last call. A Runner may
// call it from any goroutine, never from two at once.
type OutputFunc func(stream, text string)

// Runner runs one snippet for the run_python tool. A snippet that fails is
// still a result; the error is for runs that did not happen. An error that
// is a 4xx of the API (an *api.Error or a *client.Error) other than 401,
// 403 and 429 is the request's fault, which the model can fix; any other
// is the sandbox being unavailable.
//
// A Runner that can stream passes the run's output to onOutput (which may
// be nil) as it comes; one that cannot ignores it.
type Runner interface {
	Run(ctx context.Context, req wire.ExecuteRequest, onOutput OutputFunc) (wire.Result, error)
}

// Remote runs snippets on a deployment, through its API.
type Remote struct {
	Client *client.Client
}

// Run implements Runner; with onOutput, the request is streamed and
// onOutput gets the output as it comes.
func (r Remote) Run(ctx context.Context, req wire.ExecuteRequest, onOutput OutputFunc) (wire.Result, error) {
	if onOutput == nil {
		return r.Client.Execute(ctx, req)
	}
	return r.Client.ExecuteStream(ctx, req, onOutput)
}

// Executor runs one validated job: a backend of serve's (the local one, or
// the warm pool).
type Executor interface {
	Execute(ctx context.Context, job exec.Job) (wire.Result, error)
}

// Local runs snippets on a backend in this process, validating each
// request as serve validates a POST /v1/execute.
type Local struct {
	Backend Executor
	// MaxBody bounds the request as JSON, as serve's --max-body bounds a
	// body; 0 means api.DefaultMaxBody.
	MaxBody int64
}

// Run implements Runner; onOutput gets the run's output as it comes.
func (l Local) Run(ctx context.Context, req wire.ExecuteRequest, onOutput OutputFunc) (wire.Result, error) {
	maxBody := l.MaxBody
	if maxBody <= 0 {
		maxBody = api.DefaultMaxBody
	}
	job, err := api.Validate(req, maxBody)
	if err != nil {
		return wire.Result{}, err
	}
	job.Output = onOutput
	return l.Backend.Execute(ctx, job)
}
