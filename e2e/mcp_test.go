//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/e2e/kindenv"
	"github.com/sandboxd/sandbox/internal/auth"
	"github.com/sandboxd/sandbox/internal/mcpserver"
	"github.com/sandboxd/sandbox/wire"
)

// mcpInitialize is an MCP initialize request, as a client sends it first.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`

// postMCP posts body to base's /mcp with token ("" for none) and returns
// the status and body of the answer.
func postMCP(ctx context.Context, t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// suiteToken is the suite's caller token (kindenv's CallerToken), which
// the shipped policy grants snippets.
func suiteToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(os.Getenv(client.TokenFileEnv))
	if err != nil {
		t.Fatalf("the suite's caller token: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// bearerTransport sends a token with each request of the SDK's client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// callRunPython calls run_python, waiting out a pool with no free pod (the
// protocol error with status 503) as an agent's host would.
func callRunPython(ctx context.Context, t *testing.T, cs *mcp.ClientSession, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args})
		var werr *jsonrpc.Error
		var data mcpserver.ErrorData
		if errors.As(err, &werr) && werr.Code == mcpserver.CodeUnavailable && json.Unmarshal(werr.Data, &data) == nil &&
			data.Status == http.StatusServiceUnavailable && ctx.Err() == nil {
			t.Logf("no sandbox yet (%s), retrying", werr.Message)
			time.Sleep(max(time.Duration(data.RetryAfterS)*time.Second, 2*time.Second))
			continue
		}
		if err != nil {
			t.Fatalf("run_python: %v", err)
		}
		return res
	}
}

// TestMCP: serve's /mcp on kind, behind the same door as /v1/*: refused
// without a token (401) and to a caller the policy does not name (403);
// the Go SDK's client, with the suite's token, lists run_python and runs a
// numpy and matplotlib snippet in the warm pool, its chart coming back as
// an image; and the TypeScript SDK's client (make mcp-test installs it)
// does what it does against sandbox mcp.
func TestMCP(t *testing.T) {
	f := features.New("/mcp serves run_python behind the front door").
		WithLabel("needs", "service").
		Setup(withService).
		Assess("no token is a 401, a stranger a 403", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			base := service(ctx)
			status, body := postMCP(ctx, t, base, "", mcpInitialize)
			var eb wire.ErrorBody
			if status != http.StatusUnauthorized || json.Unmarshal([]byte(body), &eb) != nil || !strings.Contains(eb.Error, "no token") {
				t.Errorf("no token: %d %s, want 401 saying no token", status, body)
			}
			stranger, err := Suite(ctx).Token(ctx, kindenv.Namespace, "default", auth.DefaultAudience, "10m")
			if err != nil {
				t.Fatal(err)
			}
			if status, body := postMCP(ctx, t, base, stranger, mcpInitialize); status != http.StatusForbidden || !strings.Contains(body, ":default") {
				t.Errorf("a caller the policy names nowhere: %d %s, want 403 naming it", status, body)
			}
			if status, body := postMCP(ctx, t, base, suiteToken(t), mcpInitialize); status != http.StatusOK || !strings.Contains(body, `"serverInfo"`) {
				t.Errorf("the suite's caller: %d %s, want the initialize result", status, body)
			}
			return ctx
		}).
		Assess("the Go SDK's client runs numpy and a chart", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			tr := &mcp.StreamableClientTransport{Endpoint: service(ctx) + "/mcp",
				HTTPClient: &http.Client{Transport: bearerTransport{suiteToken(t)}}, MaxRetries: -1}
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(cctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			tools, err := cs.ListTools(cctx, nil)
			if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != mcpserver.ToolName {
				t.Fatalf("tools %+v, %v", tools, err)
			}
			res := callRunPython(ctx, t, cs, map[string]any{
				"code":    "import numpy as np, matplotlib.pyplot as plt\nplt.plot(np.arange(5)); plt.savefig('chart.png')\nprint(np.arange(5).sum())",
				"outputs": []string{"chart.png"}, "timeout_s": 30})
			if len(res.Content) != 2 || res.IsError {
				t.Fatalf("result %+v, want the text and the chart", res.Content)
			}
			if txt := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "exit code: 0") || !strings.Contains(txt, "stdout:\n10") {
				t.Errorf("text %q", txt)
			}
			if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || len(img.Data) < 1000 {
				t.Errorf("second content %#v, want the chart as a PNG", res.Content[1])
			}
			if res.Meta["request_id"] == nil || res.Meta["sandbox_id"] == nil {
				t.Errorf("_meta %v, want the request and the pod", res.Meta)
			}
			return ctx
		}).
		Assess("the TypeScript SDK's client", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			npmDir := os.Getenv("MCP_NPM_DIR")
			if npmDir == "" {
				npmDir = "/var/cache/sandbox-npm"
			}
			if _, err := os.Stat(filepath.Join(npmDir, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
				t.Skipf("the TypeScript SDK is not installed in %s (make mcp-test installs it): %v", npmDir, err)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			cmd := osexec.CommandContext(cctx, "node", "../internal/mcpserver/testdata/client.mjs")
			cmd.Env = append(os.Environ(), "SANDBOX_NPM_DIR="+npmDir, "SANDBOX_MCP_URL="+service(ctx)+"/mcp")
			out, err := cmd.CombinedOutput()
			t.Logf("client.mjs:\n%s", out)
			if err != nil {
				t.Errorf("client.mjs: %v", err)
			}
			return ctx
		}).
		Feature()
	testenv.Test(t, f)
}
