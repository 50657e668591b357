package modes

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/mcpserver"
)

// startMCP starts `sandbox mcp args...` as a process of its own (this test
// binary as the sandbox binary) and connects the SDK's own client to it
// over stdio: what a desktop assistant does.
func startMCP(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := osexec.Command(os.Args[0], append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), asBinary+"=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to sandbox mcp %q: %v\nits stderr:\n%s", args, err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("close: %v", err)
		}
		if t.Failed() {
			t.Logf("sandbox mcp's stderr:\n%s", stderr.String())
		}
	})
	return cs
}

func runPython(t *testing.T, cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: args})
}

// TestMCPStdioLocal: sandbox mcp --backend local, as its own process on
// stdio, lists run_python and runs snippets in the embedded local backend:
// the output as text, an image among the outputs as image content, a CSV
// as a resource, and a bad pattern as a tool error.
func TestMCPStdioLocal(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	chart, err := os.ReadFile("../mcpserver/testdata/chart.py")
	if err != nil {
		t.Fatal(err)
	}
	cs := startMCP(t, "--backend", "local")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != mcpserver.ToolName {
		t.Fatalf("tools %+v, %v", tools, err)
	}

	res, err := runPython(t, cs, map[string]any{"code": "print(6*7)"})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; res.IsError || !strings.Contains(txt, "exit code: 0") || !strings.Contains(txt, "stdout:\n42") {
		t.Errorf("result %q", txt)
	}

	res, err = runPython(t, cs, map[string]any{"code": string(chart), "outputs": []string{"out/*"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) != 3 {
		t.Fatalf("%d contents, want text, image, resource: %+v", len(res.Content), res.Content)
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || len(img.Data) != 69 {
		t.Errorf("second content %#v, want the 69-byte PNG", res.Content[1])
	}
	if r, ok := res.Content[2].(*mcp.EmbeddedResource); !ok || r.Resource.Text != "a,b\n1,2\n" || !strings.HasSuffix(r.Resource.URI, "/out/stats.csv") {
		t.Errorf("third content %#v, want stats.csv", res.Content[2])
	}

	res, err = runPython(t, cs, map[string]any{"code": "pass", "outputs": []string{"../*"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `".." component`) {
		t.Errorf("a bad pattern: %+v, %v, want a tool error naming it", res, err)
	}
}

// startServeProcess runs `sandbox serve --backend local` as a process of
// its own and returns its URL. Not in this process, as startServe does:
// the local backend reaps every child of its process, sandbox mcp's too.
func startServeProcess(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := osexec.Command(os.Args[0], "serve", "--backend", "local", "--listen", addr)
	cmd.Env = append(os.Environ(), asBinary+"=1")
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve: %v\n%s", err, logs.String())
		}
	})
	url := "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become ready: %v\n%s", err, logs.String())
		}
	}
}

// TestMCPStdioRemote: sandbox mcp --url runs snippets on the service at
// the URL, and one it cannot reach is a protocol error.
func TestMCPStdioRemote(t *testing.T) {
	url := startServeProcess(t)
	cs := startMCP(t, "--url", url)
	res, err := runPython(t, cs, map[string]any{"code": "import sys; print('oops', file=sys.stderr); sys.exit(3)"})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*mcp.TextContent).Text; res.IsError || !strings.Contains(txt, "exit code: 3") || !strings.Contains(txt, "stderr:\noops") {
		t.Errorf("result %q: a snippet that fails is a result, not an error", txt)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	cs = startMCP(t, "--url", down)
	_, err = runPython(t, cs, map[string]any{"code": "print(1)"})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != mcpserver.CodeUnavailable || !strings.Contains(werr.Message, "unavailable") {
		t.Errorf("no service: %v, want a protocol error", err)
	}
}

// TestMCPTypeScriptClientOverHTTP: the TypeScript SDK's client (make
// mcp-test installs it) runs client.mjs against serve's /mcp over
// streamable HTTP, serve being a process of its own. Skipped, saying so,
// where the SDK is not installed.
func TestMCPTypeScriptClientOverHTTP(t *testing.T) {
	npmDir := os.Getenv("MCP_NPM_DIR")
	if npmDir == "" {
		npmDir = "/var/cache/sandbox-npm"
	}
	if _, err := os.Stat(filepath.Join(npmDir, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skipf("the TypeScript SDK is not installed in %s (make mcp-test installs it)", npmDir)
	}
	if _, err := osexec.LookPath("node"); err != nil {
		t.Skip("no node")
	}
	url := startServeProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, "node", "../mcpserver/testdata/client.mjs")
	cmd.Env = append(os.Environ(), "SANDBOX_NPM_DIR="+npmDir, "SANDBOX_MCP_URL="+url+"/mcp")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), " 0 failed") {
		t.Errorf("client.mjs: %v\n%s", err, out)
	}
}
