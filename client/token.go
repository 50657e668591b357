package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// TokenFileEnv names the file of the caller's bearer token.
const TokenFileEnv = "SANDBOX_TOKEN_FILE"

// DefaultTokenFile is where an agent's pod mounts its projected
// ServiceAccount token for the service (audience "sandbox"), and so where
// the token is looked for when TokenFileEnv is unset.
const DefaultTokenFile = "/var/run/secrets/sandbox/token"

// maxToken bounds a token file (64 KiB): a ServiceAccount token is a
// kilobyte or two, and a wrong path (a log, /dev/zero) must fail at once
// rather than be read without end or sent as a header.
const maxToken = 64 << 10

// TokenSource gives the bearer token to send with a request to /v1/*, or ""
// to send none. It is called for every request, so it may return a new
// token each time.
type TokenSource func(ctx context.Context) (string, error)

// WithTokenSource makes the client send the token ts gives; nil sends none.
// The default is DefaultTokenSource().
func WithTokenSource(ts TokenSource) Option { return func(c *Client) { c.token = ts } }

// TokenFile reads the token from path for every request, since the kubelet
// rotates a projected token in its file: one read at the start would go
// stale within the hour. A file that cannot be read, or holds no token, is
// an error, and the request is not sent.
func TokenFile(path string) TokenSource {
	return func(context.Context) (string, error) { return readToken(path) }
}

// DefaultTokenSource is TokenFile of $SANDBOX_TOKEN_FILE when it is set;
// else the token in DefaultTokenFile, or none when that file does not
// exist (a client outside a pod, a service without authentication).
func DefaultTokenSource() TokenSource {
	return defaultTokenSource(os.Getenv(TokenFileEnv), DefaultTokenFile)
}

func defaultTokenSource(env, fallback string) TokenSource {
	if env != "" {
		return TokenFile(env)
	}
	return func(context.Context) (string, error) {
		tok, err := readToken(fallback)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return tok, err
	}
}

// readToken reads a token file. Its errors never hold the token.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err // a *fs.PathError: it names the file
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("read token file %s: %w", path, err)
	}
	if len(b) > maxToken {
		return "", fmt.Errorf("token file %s: over %d bytes, not a token", path, maxToken)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	// A bearer token is printable ASCII without spaces; anything else would
	// make a broken header, and saying which byte would show the token.
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return "", fmt.Errorf("token file %s: not a bearer token (it holds a space, a control character or non-ASCII)", path)
		}
	}
	return tok, nil
}
