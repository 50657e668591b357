//go:build linux

package runner

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/internal/seal"
	"github.com/sandboxd/sandbox/wire"
)

// callShim is the Python side of a tool call (see RunCall).
//
//go:embed callshim.py
var callShim string

// RunCall makes one tool call here: it imports call.Module with python3 in
// the working directory opts.Dir, resolves call.Attr, calls it with the
// call's arguments, and reports the value, or the exception, from a file of
// its own: what the tool prints is stdout and stderr and nothing else. The
// run has exec's guarantees (deadline, tree kill, bounded output). The
// child's environment is env (the image's, see ToolEnv) plus call.Env.
// An error means the call could not be made at all; a tool that failed is a
// result.
func RunCall(ctx context.Context, call api.Call, opts exec.Options, env []string) (wire.CallResult, error) {
	dir, err := os.MkdirTemp("", "sandbox-call-")
	if err != nil {
		return wire.CallResult{}, fmt.Errorf("call: %w", err)
	}
	defer os.RemoveAll(dir)
	spec, err := json.Marshal(map[string]any{"module": call.Module, "attr": call.Attr, "args": call.Args, "kwargs": call.Kwargs})
	if err != nil {
		return wire.CallResult{}, fmt.Errorf("call: encode spec: %w", err)
	}
	specPath, resultPath := filepath.Join(dir, "call.json"), filepath.Join(dir, "result.json")
	if err := os.WriteFile(specPath, spec, 0o600); err != nil {
		return wire.CallResult{}, fmt.Errorf("call: %w", err)
	}
	code := callShim + fmt.Sprintf("_sandbox_call(%s, %s, %d)\n", pyString(specPath), pyString(resultPath), api.MaxCallResult)
	opts.Env = mergeEnv(env, call.Env)
	res, err := exec.RunInImage(ctx, exec.Job{Code: code, Timeout: call.Timeout}, opts)
	out := wire.CallResult{SandboxID: res.SandboxID, Result: json.RawMessage("null"), Process: res.Process}
	if err != nil {
		return out, err
	}
	if res.TimedOut || res.OOMKilled {
		// Whatever the file holds was written by a run that did not end
		// on its own; the flags say what happened.
		return out, nil
	}
	readOutcome(resultPath, &out)
	return out, nil
}

// readOutcome fills out's Result or Error from the shim's file.
func readOutcome(path string, out *wire.CallResult) {
	noResult := func(why string) {
		out.Error = &wire.CallError{Kind: wire.CallNoResult, Type: "NoResult",
			Message: fmt.Sprintf("the tool's process exited with code %d %s", out.ExitCode, why)}
	}
	f, err := os.Open(path)
	if err != nil {
		noResult("without reporting a value or an exception (os._exit, a signal, or python3 failing to start; see stderr)")
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, api.MaxCallResult+1<<10))
	if err != nil {
		noResult(fmt.Sprintf("and its report could not be read: %v", err))
		return
	}
	var doc struct {
		Result json.RawMessage `json:"result"`
		Error  *wire.CallError `json:"error"`
	}
	switch {
	case len(b) > api.MaxCallResult+1<<9:
		// The shim refuses values over the limit itself; a file this big
		// was written by something else.
		noResult("and a report over the answer's limit, which the service's shim never writes")
	case json.Unmarshal(b, &doc) != nil || (doc.Error == nil && doc.Result == nil):
		noResult("and a report that is not the shim's")
	case doc.Error != nil:
		out.Error = doc.Error
	default:
		out.Result = doc.Result
	}
}

// ToolEnv is the tool's environment before the request's own variables:
// the runner's, which in a tool pod is the image's ENV, less what the
// kubelet adds to every container. KUBERNETES_SERVICE_HOST and friends are
// injected even with service links off; they name the API server, which a
// tool has no business finding; seal.NodeIPEnv is the runner's own. HOME
// is set to /tmp when the image sets none: the pod's random uid has no
// passwd entry, and /tmp is the writable scratch. The runtime then sets
// HOME=/ itself, which is taken as none (the root is read-only anyway).
func ToolEnv(environ []string) []string {
	var out []string
	home := false
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KUBERNETES_") || k == seal.NodeIPEnv || kv == "HOME=/" {
			continue
		}
		home = home || k == "HOME"
		out = append(out, kv)
	}
	if !home {
		out = append(out, "HOME=/tmp")
	}
	return out
}

// mergeEnv sets extra's variables over env's.
func mergeEnv(env []string, extra map[string]string) []string {
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

// pyString is s as a Python string literal: JSON's string syntax is a
// subset of Python's for the paths it is used on.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// call serves the one POST /v1/call of a tool pod.
func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	if s.unsealed(w) {
		return
	}
	if !s.taken.CompareAndSwap(false, true) {
		api.WriteError(w, http.StatusConflict, "this runner has already taken its one call; send the next call to a fresh pod")
		return
	}
	c, err := api.DecodeCall(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err == nil && c.Timeout > s.opts.MaxTimeout {
		err = api.Errorf(http.StatusBadRequest, "timeout_s %d over this runner's limit of %d seconds",
			int(c.Timeout/time.Second), int(s.opts.MaxTimeout/time.Second))
	}
	if err != nil {
		s.taken.Store(false)
		writeRefusal(w, err)
		return
	}
	defer s.once.Do(func() { close(s.done) })

	res, err := RunCall(r.Context(), c, s.opts.Exec, s.opts.CallEnv)
	res.SandboxID = s.opts.SandboxID
	// The function is the caller's own name for its tool; arguments,
	// environment values and the value returned are never logged.
	log := s.opts.Logger.With("sandbox_id", res.SandboxID, "function", c.Function(), "exit_code", res.ExitCode,
		"duration_ms", res.DurationMS, "stdout_bytes", len(res.Stdout), "stderr_bytes", len(res.Stderr), "result_bytes", len(res.Result))
	if err != nil {
		log.Error("call failed", "outcome", wire.OutcomeFailed, "error", err)
		api.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	log.Info("call", "outcome", res.Outcome())
	api.WriteCallResult(w, res)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
