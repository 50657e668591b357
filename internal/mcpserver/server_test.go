package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// fakeRunner answers every run with res or err, after emitting output.
type fakeRunner struct {
	res    wire.Result
	err    error
	output [][2]string // stream, text
	// gap is the pause between outputs: longer than progressInterval
	// makes each its own notification, none gathers them into one.
	gap time.Duration

	mu  sync.Mutex
	got []wire.ExecuteRequest
}

func (f *fakeRunner) Run(_ context.Context, req wire.ExecuteRequest, onOutput OutputFunc) (wire.Result, error) {
	f.mu.Lock()
	f.got = append(f.got, req)
	f.mu.Unlock()
	for i, o := range f.output {
		if i > 0 {
			time.Sleep(f.gap)
		}
		if onOutput != nil {
			onOutput(o[0], o[1])
		}
	}
	return f.res, f.err
}

// connect serves New(r) over an in-memory transport and returns a client
// session of the SDK's own client.
func connect(t *testing.T, r Runner, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := New(r, Options{Version: "test"}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: args})
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatal("no content")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("first content is %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestListTools(t *testing.T) {
	cs := connect(t, &fakeRunner{}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 1 || res.Tools[0].Name != ToolName {
		t.Fatalf("tools %+v, want run_python alone", res.Tools)
	}
	tool := res.Tools[0]
	schema, _ := tool.InputSchema.(map[string]any)
	if req, _ := schema["required"].([]any); len(req) != 1 || req[0] != "code" {
		t.Errorf("required %v, want [code]", schema["required"])
	}
	for _, want := range []string{"numpy", "no network", "outputs", "timeout_s"} {
		if !strings.Contains(tool.Description, want) {
			t.Errorf("description lacks %q: %s", want, tool.Description)
		}
	}
}

var png1x1, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==")

func TestCallResult(t *testing.T) {
	f := &fakeRunner{res: wire.Result{
		SandboxID: "local-1", RequestID: "req-1",
		Process: wire.Process{Stdout: "42\n", Stderr: "warn\n", ExitCode: 3, DurationMS: 131},
		Files: []wire.OutputFile{
			{Path: "chart.png", Size: int64(len(png1x1)), Content: base64.StdEncoding.EncodeToString(png1x1), Encoding: wire.EncodingBase64},
			{Path: "out/stats.csv", Size: 4, Content: "a,b\n", Encoding: wire.EncodingUTF8},
			{Path: "blob.bin", Size: 2, Content: "AP8=", Encoding: wire.EncodingBase64},
			{Path: "big.csv", Size: 1 << 30, Omitted: true},
			{Path: "leak", Skipped: "symlink"},
		},
	}}
	cs := connect(t, f, nil)
	timeout := 5
	res, err := call(t, cs, map[string]any{"code": "print(42)", "timeout_s": timeout, "outputs": []string{"*"},
		"files": []map[string]any{{"path": "in.csv", "content": "x"}, {"path": "b.bin", "content": "AP8=", "encoding": "base64"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("isError: %s", text(t, res))
	}
	// The arguments reach the runner as the API's request.
	got := f.got[0]
	if got.Code != "print(42)" || got.TimeoutS == nil || *got.TimeoutS != 5 || len(got.Outputs) != 1 ||
		len(got.Files) != 2 || got.Files[1].Encoding != wire.EncodingBase64 {
		t.Errorf("runner got %+v", got)
	}
	txt := text(t, res)
	for _, want := range []string{"exit code: 3", "run time: 131 ms", "stdout:\n42", "stderr:\nwarn",
		"- chart.png: 70 bytes, returned; an image, shown to you after this text",
		"- out/stats.csv: 4 bytes, returned as a resource; its text:\na,b",
		"- blob.bin: 2 bytes, returned as a resource",
		"- big.csv: 1073741824 bytes, not returned: over the limit of 100 files and 10 MiB in all",
		"- leak: not returned (symlink)"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q:\n%s", want, txt)
		}
	}
	if len(res.Content) != 4 {
		t.Fatalf("%d contents, want text, one image, two resources", len(res.Content))
	}
	img, ok := res.Content[1].(*mcp.ImageContent)
	if !ok || img.MIMEType != "image/png" || string(img.Data) != string(png1x1) {
		t.Errorf("second content %#v, want the PNG", res.Content[1])
	}
	csv, ok := res.Content[2].(*mcp.EmbeddedResource)
	if !ok || csv.Resource.URI != "sandbox://local-1/out/stats.csv" || csv.Resource.Text != "a,b\n" {
		t.Errorf("third content %#v, want stats.csv as text", res.Content[2])
	}
	blob, ok := res.Content[3].(*mcp.EmbeddedResource)
	if !ok || string(blob.Resource.Blob) != "\x00\xff" || blob.Resource.MIMEType != "application/octet-stream" {
		t.Errorf("fourth content %#v, want blob.bin's bytes", res.Content[3])
	}
	if res.Meta["request_id"] != "req-1" || res.Meta["sandbox_id"] != "local-1" {
		t.Errorf("_meta %v", res.Meta)
	}
}

// TestResultBounds: streams are cut in the middle, and images and
// attachments past their bounds are named, not sent.
func TestResultBounds(t *testing.T) {
	res := wire.Result{Process: wire.Process{Stdout: strings.Repeat("a", MaxStreamChars) + strings.Repeat("b", 10), StdoutTruncated: true, TimedOut: true}}
	for i := range MaxImages + 1 {
		res.Files = append(res.Files, wire.OutputFile{Path: "img" + string(rune('0'+i)) + ".png", Size: int64(len(png1x1)),
			Content: base64.StdEncoding.EncodeToString(png1x1), Encoding: wire.EncodingBase64})
	}
	big := strings.Repeat("x", MaxResourceBytes)
	res.Files = append(res.Files, wire.OutputFile{Path: "a.txt", Size: int64(len(big)), Content: big, Encoding: wire.EncodingUTF8},
		wire.OutputFile{Path: "b.txt", Size: 1, Content: "y", Encoding: wire.EncodingUTF8})
	out := toolResult(res)
	txt := out.Content[0].(*mcp.TextContent).Text
	for _, want := range []string{"The code timed out", "The stdout was longer than the sandbox keeps",
		"[... 10 characters cut here to keep this short ...]",
		"- img4.png: 70 bytes, returned; an image, not shown to you: over 4 images or 1048576 bytes",
		"- a.txt: 1048576 bytes, returned as a resource\n",
		"- b.txt: 1 bytes, not attached: over 16 files or 1048576 bytes of attachments"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	if len(out.Content) != 1+MaxImages+1 {
		t.Errorf("%d contents, want the text, %d images and a.txt", len(out.Content), MaxImages)
	}
}

func TestRefusedIsToolError(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"embedded backend's 400", api.Errorf(http.StatusBadRequest, `outputs[0]: pattern "../*" has a ".." component`)},
		{"deployment's 400", &client.Error{StatusCode: http.StatusBadRequest, Message: `outputs[0]: pattern "../*" has a ".." component`}},
		{"deployment's 413", &client.Error{StatusCode: http.StatusRequestEntityTooLarge, Message: `outputs[0]: pattern "../*" has a ".." component`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := connect(t, &fakeRunner{err: c.err}, nil)
			res, err := call(t, cs, map[string]any{"code": "x"})
			if err != nil {
				t.Fatalf("protocol error %v, want a tool error", err)
			}
			if got := text(t, res); !res.IsError || !strings.HasPrefix(got, "error: the sandbox refused the call, nothing ran: outputs[0]") {
				t.Errorf("isError %v, text %q", res.IsError, got)
			}
		})
	}
}

// TestBadArgumentsAreToolErrors: the schema refuses what the model got
// wrong before anything runs, as a tool error it can read.
func TestBadArgumentsAreToolErrors(t *testing.T) {
	f := &fakeRunner{}
	cs := connect(t, f, nil)
	for _, args := range []map[string]any{
		{"code": "x", "timeout_s": 61},
		{"code": "x", "extra": 1},
		{"timeout_s": 1},
		{"code": "x", "files": []map[string]any{{"path": "a", "content": "b", "encoding": "hex"}}},
	} {
		res, err := call(t, cs, args)
		if err != nil || !res.IsError {
			t.Errorf("%v: err %v, result %+v, want a tool error", args, err, res)
		}
	}
	if len(f.got) != 0 {
		t.Errorf("runner ran %d times", len(f.got))
	}
}

func TestUnavailableIsProtocolError(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		status int
		says   string
	}{
		{"503", &client.Error{StatusCode: 503, Message: "no warm sandbox pod available", RetryAfter: 5 * time.Second, RequestID: "r1"}, 503, "the sandbox is unavailable"},
		{"401", (*client.AuthError)(&client.Error{StatusCode: 401, Message: "no token"}), 401, "refused this caller"},
		{"429", api.Errorf(http.StatusTooManyRequests, "too many requests in flight"), 429, "over its quota"},
		{"500", errors.New("backend panicked"), 0, "the sandbox is unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := connect(t, &fakeRunner{err: c.err}, nil)
			_, err := call(t, cs, map[string]any{"code": "x"})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != CodeUnavailable || !strings.Contains(werr.Message, c.says) {
				t.Fatalf("err %v, want a protocol error %d saying %q", err, CodeUnavailable, c.says)
			}
			if c.status != 0 && !strings.Contains(string(werr.Data), `"status":`+strconv.Itoa(c.status)) {
				t.Errorf("data %s lacks the status", werr.Data)
			}
		})
	}
}

// TestRemoteDown: a deployment that refuses connections is a protocol
// error, through the real client and a real socket.
func TestRemoteDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := client.New("http://"+addr, client.WithTokenSource(nil))
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, Remote{Client: c}, nil)
	_, err = call(t, cs, map[string]any{"code": "print(1)"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != CodeUnavailable || !strings.Contains(werr.Message, "connection refused") {
		t.Fatalf("err %v, want a protocol error naming the refused connection", err)
	}
}

// fakeBackend is an Executor that records the job it got.
type fakeBackend struct{ jobs []exec.Job }

func (b *fakeBackend) Execute(_ context.Context, job exec.Job) (wire.Result, error) {
	b.jobs = append(b.jobs, job)
	return wire.Result{SandboxID: "x"}, nil
}

// TestLocalValidates: the embedded backend gets a job only once the
// request passes serve's own checks; a bad one is a tool error naming
// the problem.
func TestLocalValidates(t *testing.T) {
	b := &fakeBackend{}
	cs := connect(t, Local{Backend: b, MaxBody: 200}, nil)
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"code": "x", "outputs": []string{"../*"}}, `".." component`},
		{map[string]any{"code": "x", "files": []map[string]any{{"path": "/etc/x", "content": ""}}}, "files[0]"},
		{map[string]any{"code": strings.Repeat("x", 300)}, "request too large"},
	} {
		res, err := call(t, cs, c.args)
		if err != nil || !res.IsError || !strings.Contains(text(t, res), c.want) {
			t.Errorf("%v: err %v, result %+v, want a tool error saying %q", c.args, err, res, c.want)
		}
	}
	if len(b.jobs) != 0 {
		t.Fatalf("backend ran %d jobs", len(b.jobs))
	}
	res, err := call(t, cs, map[string]any{"code": "print(1)", "timeout_s": 7})
	if err != nil || res.IsError || len(b.jobs) != 1 || b.jobs[0].Timeout != 7*time.Second {
		t.Errorf("err %v, result %+v, jobs %+v", err, res, b.jobs)
	}
}

// TestProgress: a Runner that streams has its output sent as progress
// notifications, in order, with the stream named and progress growing.
func TestProgress(t *testing.T) {
	var (
		mu  sync.Mutex
		got []*mcp.ProgressNotificationParams
	)
	f := &fakeRunner{output: [][2]string{{"stdout", "one\n"}, {"stderr", "two\n"}, {"stdout", "three\n"}}, gap: 5 * progressInterval}
	cs := connect(t, f, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Params)
	}})
	params := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}}
	params.SetProgressToken("tok-1")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		stream, text string
		progress     float64
	}{{"stdout", "one\n", 4}, {"stderr", "two\n", 8}, {"stdout", "three\n", 14}}
	if len(got) != len(want) {
		t.Fatalf("%d notifications, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.ProgressToken != "tok-1" || g.Message != w.text || g.Meta["stream"] != w.stream || g.Progress != w.progress {
			t.Errorf("notification %d: %+v, want %+v", i, g, w)
		}
	}

	// Without a token, none is sent and the runner is told so.
	got = nil
	mu.Unlock()
	if _, err := call(t, cs, map[string]any{"code": "x"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("%d notifications without a progress token", len(got))
	}
}

// TestProgressGathers: output written faster than progressInterval goes
// out in few notifications, not one per write, and none is lost.
func TestProgressGathers(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	var out [][2]string
	for i := range 1000 {
		out = append(out, [2]string{"stdout", fmt.Sprintf("%d\n", i)})
	}
	f := &fakeRunner{output: out}
	cs := connect(t, f, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Params.Message)
	}})
	params := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}}
	params.SetProgressToken("g")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, o := range out {
		want.WriteString(o[1])
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := strings.Join(got, "") == want.String()
		mu.Unlock()
		if done {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "") != want.String() {
		t.Fatalf("progress carried %d bytes, want all %d", len(strings.Join(got, "")), want.Len())
	}
	if len(got) > 10 {
		t.Errorf("%d notifications for 1,000 writes at once, want them gathered", len(got))
	}
}

// TestProgressOverHTTP: progress reaches the client over the streamable
// HTTP transport in stateless mode too (as serve mounts it at /mcp), on the
// call's own response stream, before the result.
func TestProgressOverHTTP(t *testing.T) {
	f := &fakeRunner{output: [][2]string{{"stdout", "tick\n"}, {"stdout", "tock\n"}}}
	srv := New(f, Options{})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	defer ts.Close()
	var (
		mu  sync.Mutex
		got []string
	)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r.Params.Message)
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}}
	params.SetProgressToken(7)
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "") != "tick\ntock\n" {
		t.Errorf("progress messages %q, want tick and tock", got)
	}
}

// TestProgressBound: the first MaxProgressBytes of the output go out as
// progress, then one notification says the rest is left to the result, and
// no more are sent.
func TestProgressBound(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	big := strings.Repeat("x", MaxProgressBytes-1)
	f := &fakeRunner{output: [][2]string{{"stdout", big}, {"stdout", "yy"}, {"stderr", "zz"}}}
	cs := connect(t, f, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Params.Message)
	}})
	params := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}}
	params.SetProgressToken("t")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // room for a third, which must not come
	mu.Lock()
	defer mu.Unlock()
	// Output queued together goes out together: what fits, then the note.
	if n := len(got); n < 2 || !strings.Contains(got[n-1], "not sent as progress") {
		t.Fatalf("%d notifications, want the output and then the note alone", len(got))
	}
	sent := strings.Join(got[:len(got)-1], "")
	if len(sent) != MaxProgressBytes || !strings.HasPrefix(big+"yy", sent) {
		t.Errorf("%d bytes sent as progress before the note, want the first %d of the output", len(sent), MaxProgressBytes)
	}
}
