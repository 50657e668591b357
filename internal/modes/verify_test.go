package modes

import (
	"bytes"
	"strings"
	"testing"
)

func TestVerifyList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"verify", "--list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "| runner/timeout-kills-tree |") {
		t.Errorf("--list printed no catalogue:\n%s", out.String())
	}
}
