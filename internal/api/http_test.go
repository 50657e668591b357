package api

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/wire"
)

// TestResultJSON: a result's files and usage as the answer carries them,
// HTML characters as they are (an HTML file sent back is not six times its
// size), and an omitted file without content.
func TestResultJSON(t *testing.T) {
	res := wire.Result{SandboxID: "s", Usage: wire.Usage{CPUMS: 12, MaxRSSKiB: 9000, Processes: 1},
		Files: []wire.OutputFile{
			{Path: "page.html", Size: 8, Content: "<p>&</p>", Encoding: wire.EncodingUTF8},
			{Path: "big.csv", Size: 20 << 20, Omitted: true},
		}, FilesIncomplete: true}
	w := httptest.NewRecorder()
	WriteJSON(w, 200, res)
	body := w.Body.String()
	for _, want := range []string{
		`"files":[{"path":"page.html","size":8,"content":"<p>&</p>","encoding":"utf-8"},{"path":"big.csv","size":20971520,"omitted":true}]`,
		`"files_incomplete":true`,
		`"usage":{"cpu_ms":12,"max_rss_kib":9000,"processes":1}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("answer %s\nlacks %s", body, want)
		}
	}
	var back wire.Result
	if err := json.Unmarshal([]byte(body), &back); err != nil || back.Files[0] != res.Files[0] || back.Usage != res.Usage {
		t.Errorf("decodes to %+v, %v", back, err)
	}
	w = httptest.NewRecorder()
	WriteJSON(w, 200, wire.Result{})
	if strings.Contains(w.Body.String(), "files") {
		t.Errorf("a result without outputs names files: %s", w.Body)
	}
}
