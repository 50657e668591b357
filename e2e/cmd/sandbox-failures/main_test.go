package main

import (
	"strings"
	"testing"
)

// events is what `go tool test2json -t` made of a -v log where TestA/sub_one
// and TestC failed and TestA/sub_two and TestB passed.
const events = `{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Test":"TestA/sub_one","Output":"    x_test.go:4: noise\n"}
{"Action":"output","Test":"TestA/sub_one","Output":"    x_test.go:4: bad thing\n"}
{"Action":"output","Test":"TestA/sub_one","Output":"        second line\n"}
{"Action":"output","Test":"TestA/sub_two","Output":"    x_test.go:5: fine\n"}
{"Action":"output","Test":"TestA/sub_one","Output":"    --- FAIL: TestA/sub_one (0.00s)\n"}
{"Action":"fail","Test":"TestA/sub_one","Elapsed":1.5}
{"Action":"pass","Test":"TestA/sub_two"}
{"Action":"fail","Test":"TestA","Elapsed":2}
not an event
{"Action":"output","Test":"TestB","Output":"    x_test.go:7: b ok\n"}
{"Action":"pass","Test":"TestB"}
{"Action":"output","Test":"TestC","Output":"    x_test.go:8: c fatal, and a long line\n"}
{"Action":"fail","Test":"TestC"}
{"Action":"fail","Package":"tj"}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	if err := report(strings.NewReader(events), &out, 2, 20); err != nil {
		t.Fatal(err)
	}
	want := `--- FAIL: TestA/sub_one (1.5s), its last lines:
    x_test.go:4: bad…
        second line
--- FAIL: TestC (0.0s), its last lines:
    x_test.go:8: c f…
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}
