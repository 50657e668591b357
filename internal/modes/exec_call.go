package modes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// CallFlags make `sandbox exec` a tool call: `sandbox exec --call
// tools.weather:get --image IMG --kwargs '{"city":"Oslo"}'`.
type CallFlags struct {
	Function string   `name:"call" placeholder:"MODULE:ATTR" help:"Call this function of the image (tools.weather:get) in a one-use pod of --image, instead of running code."`
	Image    string   `name:"image" placeholder:"IMAGE" help:"With --call: the agent's image the function is in (it must be on the service's allow list)."`
	Args     string   `name:"args" placeholder:"JSON" help:"With --call: the positional arguments, a JSON array."`
	Kwargs   string   `name:"kwargs" placeholder:"JSON" help:"With --call: the keyword arguments, a JSON object."`
	Env      []string `name:"env" short:"e" sep:"none" placeholder:"NAME=VALUE" help:"With --call: an environment variable for the tool. Repeatable."`
}

func (c *ExecCmd) validateCall() error {
	switch {
	case c.Code != "" || c.Source != "" || len(c.Files) > 0 || len(c.Outputs) > 0 || c.OutputDir != "":
		return errors.New("--call runs a function of the image: no code, file, --file or --output with it")
	case c.Image == "":
		return errors.New("--call needs --image, the agent's image the function is in")
	case c.Timeout != 0 && c.Timeout < time.Second:
		return fmt.Errorf("--timeout %s: at least 1s", c.Timeout)
	}
	return nil
}

// callRequest builds the body from the flags.
func (c *ExecCmd) callRequest() (wire.CallRequest, error) {
	req := wire.CallRequest{Image: c.Image, Function: c.Function}
	for _, f := range []struct {
		flag, val string
		dst       *json.RawMessage
	}{{"--args", c.Args, &req.Args}, {"--kwargs", c.Kwargs, &req.Kwargs}} {
		if f.val == "" {
			continue
		}
		if !json.Valid([]byte(f.val)) {
			return req, fmt.Errorf("%s %q: not JSON", f.flag, f.val)
		}
		*f.dst = json.RawMessage(f.val)
	}
	if c.Timeout != 0 {
		t := wire.TimeoutS(c.Timeout)
		req.TimeoutS = &t
	}
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return req, fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	return req, nil
}

// runCall makes the call. The return value, as JSON, is the only thing on
// stdout, so that scripts can read it; what the tool printed goes to
// stderr. Exit status: 0 with a value, 1 when the function raised or left
// none (its type, message and traceback on stderr), 124 on timeout, 125
// when the call did not run.
func (c *ExecCmd) runCall(d *Deps) error {
	req, err := c.callRequest()
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	res, err := cl.Call(d.Ctx, req)
	if err != nil {
		fmt.Fprintf(d.Stderr, "sandbox: exec: %s\n", describe(err, c.URL))
		return &ExitError{Code: exitNotRun}
	}
	if c.JSON {
		return printJSON(d.Stdout, res)
	}
	io.WriteString(d.Stderr, res.Stdout)
	io.WriteString(d.Stderr, res.Stderr)
	switch {
	case res.TimedOut:
		fmt.Fprintf(d.Stderr, "sandbox: the call timed out in %s and was killed\n", res.SandboxID)
		return &ExitError{Code: exitTimedOut}
	case res.OOMKilled:
		fmt.Fprintf(d.Stderr, "sandbox: the call ran out of memory in %s and was killed\n", res.SandboxID)
		return &ExitError{Code: 1}
	case res.Error != nil:
		if res.Error.Traceback != "" {
			io.WriteString(d.Stderr, res.Error.Traceback)
		} else {
			fmt.Fprintf(d.Stderr, "%s: %s\n", res.Error.Type, res.Error.Message)
		}
		return &ExitError{Code: 1}
	}
	_, err = fmt.Fprintf(d.Stdout, "%s\n", res.Result)
	return err
}
