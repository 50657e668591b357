package modes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Exit codes of `sandbox exec` that are not the snippet's own.
const (
	// exitTimedOut is what timeout(1) uses for a command it killed.
	exitTimedOut = 124
	// exitNotRun says the snippet did not run: the service was unreachable
	// or refused the request (docker run uses 125 the same way).
	exitNotRun = 125
)

// ExecCmd sends one snippet to a sandbox service and prints its output.
type ExecCmd struct {
	URL       string        `env:"SANDBOX_URL" default:"http://${listen}" help:"Base URL of the sandbox service."`
	TokenFile string        `name:"token-file" env:"SANDBOX_TOKEN_FILE" placeholder:"PATH" help:"File of the bearer token to send, read for each request (default: ${token_file}, when it exists)."`
	Code      string        `short:"c" help:"Python code to run."`
	Source    string        `arg:"" optional:"" name:"file" help:"File holding the code to run; - reads standard input."`
	Timeout   time.Duration `help:"Time limit of the snippet (whole seconds, at most ${max_timeout}; default ${timeout}), or of the --call (at most ${max_call_timeout}; default ${call_timeout})."`
	Files     []string      `name:"file" short:"f" sep:"none" placeholder:"PATH[=LOCAL]" help:"Input file put at PATH in the sandbox's working directory, read from LOCAL (default: PATH). Repeatable."`
	JSON      bool          `name:"json" help:"Print the result as JSON and exit 0 when the snippet ran, whatever its exit code."`
	Outputs   []string      `name:"output" sep:"none" placeholder:"PATTERN" help:"Bring back the files of the sandbox's working directory that match PATTERN ('out/*', '*.png', '**/*.csv'; * also matches dot files, ** any number of directories) and write them under --output-dir. Repeatable."`
	OutputDir string        `name:"output-dir" placeholder:"DIR" help:"Where --output files are written, made if missing (default: the current directory). Nothing is written outside it, and no symlink in it is followed."`

	CallFlags `embed:"" group:"tool calls"`
}

// Validate checks that exactly one source of code is given.
func (c *ExecCmd) Validate() error {
	if c.Function != "" {
		return c.validateCall()
	}
	if c.Image != "" || c.Args != "" || c.Kwargs != "" || len(c.Env) > 0 {
		return errors.New("--image, --args, --kwargs and --env go with --call")
	}
	switch {
	case c.Code != "" && c.Source != "":
		return errors.New("give the code with -c or as a file, not both")
	case c.Code == "" && c.Source == "":
		return errors.New("no code: give -c CODE, a FILE, or - for standard input")
	case c.Timeout != 0 && c.Timeout < time.Second:
		return fmt.Errorf("--timeout %s: at least 1s", c.Timeout)
	case c.OutputDir != "" && len(c.Outputs) == 0:
		return errors.New("--output-dir goes with --output PATTERN")
	}
	if err := exec.CheckOutputs(c.Outputs); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	return nil
}

// Run sends the snippet and passes on its output and exit code: the
// snippet's own, 124 when it timed out, 125 when it did not run.
func (c *ExecCmd) Run(d *Deps) error {
	if c.Function != "" {
		return c.runCall(d)
	}
	req, err := c.request(os.Stdin)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if c.JSON {
		res, err := cl.Execute(d.Ctx, req)
		if err != nil {
			fmt.Fprintf(d.Stderr, "sandbox: exec: %s\n", describe(err, c.URL))
			return &ExitError{Code: exitNotRun}
		}
		saveErr := c.saveOutputs(d.Stderr, res)
		if err := printJSON(d.Stdout, res); err != nil {
			return err
		}
		if saveErr != nil {
			return &ExitError{Code: 1}
		}
		return nil
	}
	// The output as it comes: its events carry all of what the result's
	// stdout and stderr say, so those are not printed again.
	res, err := cl.ExecuteStream(d.Ctx, req, func(stream, text string) {
		if stream == wire.EventStderr {
			io.WriteString(d.Stderr, text)
			return
		}
		io.WriteString(d.Stdout, text)
	})
	if err != nil {
		fmt.Fprintf(d.Stderr, "sandbox: exec: %s\n", describe(err, c.URL))
		return &ExitError{Code: exitNotRun}
	}
	saveErr := c.saveOutputs(d.Stderr, res)
	switch {
	case saveErr != nil && !res.TimedOut && res.ExitCode == 0:
		return &ExitError{Code: 1}
	case res.TimedOut:
		return &ExitError{Code: exitTimedOut}
	case res.ExitCode == 0:
		return nil
	case res.ExitCode < 0 || res.ExitCode > 255:
		return &ExitError{Code: 1}
	}
	return &ExitError{Code: res.ExitCode}
}

// client is the client of --url, with the token of --token-file.
func (c *ExecCmd) client() (*client.Client, error) {
	return newClient(c.URL, c.TokenFile)
}

// request builds the body from the flags; stdin backs "-".
func (c *ExecCmd) request(stdin io.Reader) (wire.ExecuteRequest, error) {
	code := c.Code
	switch c.Source {
	case "":
	case "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return wire.ExecuteRequest{}, fmt.Errorf("read code from standard input: %w", err)
		}
		code = string(b)
	default:
		b, err := os.ReadFile(c.Source)
		if err != nil {
			return wire.ExecuteRequest{}, fmt.Errorf("read code: %w", err)
		}
		code = string(b)
	}
	timeout := wire.TimeoutS(c.Timeout)
	if c.Timeout == 0 {
		timeout = api.DefaultTimeoutS
	}
	req := wire.ExecuteRequest{Code: code, TimeoutS: &timeout, Outputs: c.Outputs}
	for _, spec := range c.Files {
		dst, src, ok := strings.Cut(spec, "=")
		if !ok {
			src = dst
		}
		if dst == "" || src == "" {
			return wire.ExecuteRequest{}, fmt.Errorf("--file %q: want PATH or PATH=LOCAL", spec)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return wire.ExecuteRequest{}, fmt.Errorf("--file %q: %w", spec, err)
		}
		req.Files = append(req.Files, wire.FileOf(dst, b))
	}
	return req, nil
}

// saveOutputs writes the files that came back under --output-dir and says
// on stderr what did not come back and why. Its error is already reported.
func (c *ExecCmd) saveOutputs(stderr io.Writer, res wire.Result) error {
	if len(c.Outputs) == 0 {
		return nil
	}
	for _, f := range res.Files {
		switch {
		case f.Omitted:
			fmt.Fprintf(stderr, "sandbox: %s: not brought back (%d bytes, past the limit of %d files and %d bytes)\n",
				f.Path, f.Size, exec.MaxOutputFiles, exec.MaxOutputBytes)
		case f.Skipped != "":
			fmt.Fprintf(stderr, "sandbox: %s: not brought back: %s\n", f.Path, f.Skipped)
		}
	}
	if res.FilesIncomplete {
		fmt.Fprintln(stderr, "sandbox: some matching files were not brought back (over the limits)")
	}
	dir := c.OutputDir
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "sandbox: exec: %v\n", err)
		return err
	}
	_, err := client.SaveFiles(dir, res.Files)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox: exec: %v\n", err)
	}
	return err
}

// describe says what went wrong, in one line a CLI user can act on.
func describe(err error, url string) string {
	var ce *client.Error
	if !errors.As(err, &ce) {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			return fmt.Sprintf("cannot reach the sandbox service at %s (set --url or SANDBOX_URL): %v", url, err)
		}
		return err.Error() // no token to send, or a broken answer: it says which
	}
	var msg string
	switch {
	case ce.BrokeOff:
		msg = fmt.Sprintf("the run broke off after it began (%d): %s", ce.StatusCode, ce.Message)
	case ce.StatusCode == http.StatusUnauthorized:
		msg = fmt.Sprintf("the service did not accept the token (401): %s (set --token-file or SANDBOX_TOKEN_FILE)", ce.Message)
	case ce.StatusCode == http.StatusForbidden:
		msg = fmt.Sprintf("the service does not let this caller do that (403): %s", ce.Message)
	default:
		msg = fmt.Sprintf("the service refused the request (%d): %s", ce.StatusCode, ce.Message)
	}
	if ce.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %s)", ce.RetryAfter)
	}
	if ce.RequestID != "" {
		msg += fmt.Sprintf(" [request %s]", ce.RequestID)
	}
	return msg
}

// printJSON writes an answer as one line of JSON, for --json.
func printJSON(w io.Writer, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}
