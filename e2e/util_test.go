//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sandboxd/sandbox/client"
)

func intstrPort(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

// authorize adds the suite's caller token (the file kindenv's CallerToken
// names in SANDBOX_TOKEN_FILE) to a request the test makes by hand; the
// Go client reads it by itself.
func authorize(req *http.Request) error {
	path := os.Getenv(client.TokenFileEnv)
	if path == "" {
		return nil
	}
	tok, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the suite's caller token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	return nil
}
