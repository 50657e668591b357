// Package mcpserver is the sandbox as a Model Context Protocol server: one
// tool, run_python, that runs a snippet through a Runner (a deployment's
// API, or a backend in this process) and answers with what the model should
// read. `sandbox mcp` serves it over stdio, and serve at /mcp.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// ToolName is the tool's name, as the Python package names it too.
const ToolName = "run_python"

// Description tells the model what the tool does and what the sandbox
// image offers (docs/api.md has the limits it quotes).
var Description = fmt.Sprintf("Run Python 3 code in a fresh, isolated sandbox and get back its stdout, stderr and exit code. "+
	"Use it to compute, parse or transform data exactly instead of guessing. "+
	"numpy, pandas and matplotlib are installed; matplotlib has no screen, so save charts with savefig. "+
	"Each call starts from a clean slate: nothing (variables, files, installed state) survives between calls, "+
	"so include everything the code needs in one call. There is no network access, so nothing can be downloaded or installed. "+
	"The code runs in a working directory of its own; files given in files are written there first. "+
	"Print what you want to see: stdout and stderr come back to you (at most %d characters of each). "+
	"To hand files back (a chart, a result table), write them in the working directory and name them in outputs, "+
	"e.g. [\"chart.png\", \"out/*.csv\"]: images (PNG, JPEG, GIF, WebP) are shown to you, short text files are shown "+
	"as text, and each file is attached to the result; at most %d files and %d MiB come back in all. "+
	"The code and every process it started are killed at timeout_s.",
	MaxStreamChars, exec.MaxOutputFiles, exec.MaxOutputBytes>>20)

// inputSchema is the JSON Schema of the tool's arguments: the request of
// POST /v1/execute, as the Python package's RUN_PYTHON_PARAMETERS has it.
var inputSchema = json.RawMessage(fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "code": {"type": "string", "description": "The Python 3 source code to run."},
    "timeout_s": {"type": "integer", "minimum": 1, "maximum": %d,
      "description": "Deadline in seconds; the run and every process it started are killed at it. Default %d."},
    "outputs": {"type": "array", "items": {"type": "string"},
      "description": "Files to return after the run: patterns relative to the working directory, such as chart.png, *.png or out/** (** is any number of directories). At most %d files and %d MiB in all."},
    "files": {"type": "array", "description": "Input files written into the working directory before the code runs.",
      "items": {"type": "object",
        "properties": {
          "path": {"type": "string", "description": "Relative path inside the working directory."},
          "content": {"type": "string", "description": "The file's content: text, or base64 with encoding base64."},
          "encoding": {"type": "string", "enum": ["utf-8", "base64"]}
        },
        "required": ["path", "content"], "additionalProperties": false}}
  },
  "required": ["code"],
  "additionalProperties": false
}`, api.MaxTimeoutS, api.DefaultTimeoutS, exec.MaxOutputFiles, exec.MaxOutputBytes>>20))

// Args are the tool's arguments.
type Args struct {
	Code     string      `json:"code"`
	TimeoutS *int        `json:"timeout_s,omitempty"`
	Outputs  []string    `json:"outputs,omitempty"`
	Files    []wire.File `json:"files,omitempty"`
}

// Options configure the server.
type Options struct {
	// Version is the binary's, as the server names itself to clients.
	Version string
	// Logger receives the tool's events and the SDK's warnings; nil discards
	// them. Never stdout: over stdio that is the protocol.
	Logger *slog.Logger
}

// New builds the MCP server with the run_python tool, running snippets
// through r.
func New(r Runner, opts Options) *mcp.Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "sandbox", Title: "Python sandbox", Version: opts.Version},
		&mcp.ServerOptions{Logger: slog.New(floor{log.Handler(), slog.LevelWarn}),
			Instructions: "run_python runs Python code in a one-use sandbox with no network; nothing survives between calls."})
	t := &tool{runner: r, log: log}
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolName,
		Title:       "Run Python",
		Description: Description,
		InputSchema: inputSchema,
		Annotations: &mcp.ToolAnnotations{
			// It changes nothing outside its sandbox and reaches nothing.
			DestructiveHint: ptr(false),
			OpenWorldHint:   ptr(false),
		},
	}, t.call)
	return s
}

type tool struct {
	runner Runner
	log    *slog.Logger
}

// call runs the snippet. A request the sandbox refused is a result with
// isError, for the model to fix; a sandbox it could not have is a
// protocol error (a *jsonrpc.Error), for the host; a snippet that failed
// is a result like any other.
func (t *tool) call(ctx context.Context, req *mcp.CallToolRequest, in Args) (*mcp.CallToolResult, any, error) {
	wreq := wire.ExecuteRequest{Code: in.Code, TimeoutS: in.TimeoutS, Files: in.Files, Outputs: in.Outputs}
	var onOutput OutputFunc
	if token := req.Params.GetProgressToken(); token != nil {
		p := newProgress(ctx, req.Session, token, t.log)
		defer p.close()
		onOutput = p.queue
	}
	res, err := t.runner.Run(ctx, wreq, onOutput)
	if err != nil {
		r := refusalOf(err)
		if r.modelsFault() {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: r.toolError()}}}, nil, nil
		}
		t.log.Warn("run_python: no sandbox", "error", err.Error())
		return nil, nil, r.protocolError()
	}
	return toolResult(res), nil, nil
}

// MaxProgressBytes bounds the output a call sends as progress, as the
// sandbox bounds a stream it keeps: past it the result still has the
// output, and one last notification says so.
const MaxProgressBytes = 1 << 20

// progressInterval is how often queued output goes out as one
// notification per stream: a snippet printing in a tight loop makes at
// most a notification per stream this often, not one per write (the same
// as a streamed /v1/execute's events).
const progressInterval = api.StreamInterval

// progress sends a run's output as the call's progress notifications:
// each notification's message is the new output, its _meta names the
// stream, and its progress is the bytes sent so far, which only grows, as
// the protocol asks. queue takes output from the run and returns at once
// (a run's output callback must not block its pipes); a goroutine sends
// what is queued every progressInterval, and close sends the rest.
type progress struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	log     *slog.Logger

	mu      sync.Mutex
	pending [2]strings.Builder // stdout, stderr
	sent    int
	cut     bool
	stop    chan struct{}
	done    chan struct{}
}

func newProgress(ctx context.Context, ss *mcp.ServerSession, token any, log *slog.Logger) *progress {
	p := &progress{ctx: ctx, session: ss, token: token, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.flush()
			case <-p.stop:
				p.flush()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// queue is the OutputFunc.
func (p *progress) queue(stream, text string) {
	i := 0
	if stream == wire.EventStderr {
		i = 1
	}
	p.mu.Lock()
	p.pending[i].WriteString(text)
	p.mu.Unlock()
}

// close sends what is still queued and stops the sender.
func (p *progress) close() {
	close(p.stop)
	<-p.done
}

// flush sends each stream's queued output as one notification.
func (p *progress) flush() {
	for i, stream := range []string{wire.EventStdout, wire.EventStderr} {
		p.mu.Lock()
		text := p.pending[i].String()
		p.pending[i].Reset()
		p.mu.Unlock()
		p.send(stream, text)
	}
}

// send sends one notification. One that cannot be sent is logged and
// dropped: the result carries the output all the same.
func (p *progress) send(stream, text string) {
	if p.cut || text == "" {
		return
	}
	if room := MaxProgressBytes - p.sent; len(text) > room {
		for room > 0 && !utf8.RuneStart(text[room]) {
			room--
		}
		p.send(stream, text[:room])
		p.cut = true
		p.notify("sandbox", fmt.Sprintf("[output past %d bytes is not sent as progress; the result has it]", MaxProgressBytes))
		return
	}
	p.notify(stream, text)
}

func (p *progress) notify(stream, text string) {
	if text == "" {
		return
	}
	p.sent += len(text)
	err := p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token,
		Progress:      float64(p.sent),
		Message:       text,
		Meta:          mcp.Meta{"stream": stream},
	})
	if err != nil {
		p.log.Debug("run_python: progress not sent", "error", err.Error())
	}
}

func ptr[T any](v T) *T { return &v }

// floor passes on records at level or above: the SDK logs each session's
// start and end at info, which over /mcp is every request, already in
// serve's audit line.
type floor struct {
	slog.Handler
	level slog.Level
}

func (f floor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.level && f.Handler.Enabled(ctx, l)
}

func (f floor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return floor{f.Handler.WithAttrs(attrs), f.level}
}

func (f floor) WithGroup(name string) slog.Handler { return floor{f.Handler.WithGroup(name), f.level} }
