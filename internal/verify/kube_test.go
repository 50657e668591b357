package verify

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// TestUpgradeFailedMatchesClientGo makes client-go's WebSocket executor meet
// an API server that will not upgrade the connection, and checks that the
// fallback predicate recognises the error it returns: otherwise exec into a
// sandbox pod would fail where SPDY still works.
func TestUpgradeFailedMatchesClientGo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no upgrades here", http.StatusBadRequest)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL + "/api/v1/namespaces/sandbox/pods/p/exec?command=true&stdout=true")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: srv.URL}, http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	err = ex.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdout: discard{}})
	if err == nil {
		t.Fatal("the stream opened against a server that refuses upgrades")
	}
	if !upgradeFailed(err) {
		t.Errorf("upgradeFailed(%T %v) = false: exec would not fall back to SPDY", err, err)
	}
	if upgradeFailed(errors.New("connection refused")) {
		t.Error("upgradeFailed matches any error")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
