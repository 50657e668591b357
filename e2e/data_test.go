//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"strings"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/sandboxd/sandbox/wire"
)

// dataScienceCode is what agents do most: read a CSV, compute with pandas,
// draw a chart with matplotlib, hand both back.
const dataScienceCode = `import os
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("sales.csv")
by = df.groupby("region", as_index=False)["amount"].sum().sort_values("region")
print(int(df["amount"].sum()))
os.makedirs("out", exist_ok=True)
by.to_csv("out/by_region.csv", index=False)
fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=100)
ax.plot(range(10), [v * v for v in range(10)], marker="o")
fig.savefig("out/chart.png")
`

// pandasFootprintKiB is what importing pandas alone takes in the image's
// python3 (65 MiB measured with Debian bookworm's packages); a run that
// also draws with matplotlib peaks well above it.
const pandasFootprintKiB = 60 << 10

func TestDataScience(t *testing.T) {
	f := features.New("pandas and matplotlib in a snippet pod, files and usage in the answer").
		Setup(withService).
		Assess("a CSV in, a table and a PNG out", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			var csv strings.Builder
			csv.WriteString("region,amount\n")
			total := 0
			for i := range 40 {
				fmt.Fprintf(&csv, "%s,%d\n", []string{"north", "south", "east"}[i%3], i)
				total += i
			}
			timeout := 60
			res := executeRequest(ctx, t, service(ctx), wire.ExecuteRequest{Code: dataScienceCode, TimeoutS: &timeout,
				Files:   []wire.File{{Path: "sales.csv", Content: csv.String()}},
				Outputs: []string{"out/*"}})
			if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != fmt.Sprint(total) {
				t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			if strings.Contains(res.Stderr, "Matplotlib") {
				t.Errorf("matplotlib complained (its cache is not in place?): %s", res.Stderr)
			}
			if len(res.Files) != 2 || res.FilesIncomplete {
				t.Fatalf("files %+v, incomplete %v", res.Files, res.FilesIncomplete)
			}
			chart, table := res.Files[1], res.Files[0]
			if table.Path != "out/by_region.csv" || table.Encoding != wire.EncodingUTF8 ||
				table.Content != "region,amount\neast,260\nnorth,273\nsouth,247\n" {
				t.Errorf("table: %+v", table)
			}
			b, err := chart.Bytes()
			if err != nil || chart.Path != "out/chart.png" || chart.Encoding != wire.EncodingBase64 || int64(len(b)) != chart.Size {
				t.Fatalf("chart: %s, %d bytes, %v", chart.Path, len(b), err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("chart is not a PNG: %v", err)
			}
			if got := img.Bounds().Size(); got.X != 640 || got.Y != 480 {
				t.Errorf("chart is %dx%d, want 640x480", got.X, got.Y)
			}
			u := res.Usage
			if u.CPUMS <= 0 || u.MaxRSSKiB <= pandasFootprintKiB || u.Processes < 1 {
				t.Errorf("usage %+v: want cpu_ms > 0, max_rss_kib > %d, processes >= 1", u, pandasFootprintKiB)
			}
			t.Logf("%s: run %d ms, usage %+v, chart %d bytes", res.SandboxID, res.DurationMS, u, chart.Size)
			return ctx
		}).Feature()
	testenv.Test(t, f)
}

// TestOutputsRefuseLinksInPod: in a real pod, a symlink the snippet plants
// (to a file the pod has, and to a directory) is listed as a symlink and
// never read, and a FIFO neither blocks the answer nor is read. The control
// is the snippet itself reading its link: it resolves to a real file, so a
// collector that followed paths would have read it.
func TestOutputsRefuseLinksInPod(t *testing.T) {
	const code = `import os
os.symlink('/etc/passwd', 'leak.txt')
os.symlink('/etc', 'etc')
os.mkfifo('pipe.txt')
open('ok.txt', 'w').write('ok')
print(open('leak.txt').readline().split(':')[0])
`
	f := features.New("output files in a pod: links listed, never followed; a FIFO never blocks").
		Setup(withService).
		Assess("symlinks and a FIFO", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			timeout := 20
			res := executeRequest(ctx, t, service(ctx), wire.ExecuteRequest{Code: code, TimeoutS: &timeout,
				Outputs: []string{"*.txt", "etc/*", "**"}})
			if res.ExitCode != 0 || res.Stdout != "root\n" {
				t.Fatalf("control: the snippet did not read /etc/passwd through its link: exit %d, stdout %q, stderr %q",
					res.ExitCode, res.Stdout, res.Stderr)
			}
			got := map[string]string{}
			for _, f := range res.Files {
				if strings.Contains(f.Content, "root:") {
					t.Errorf("%s: the collector read /etc/passwd", f.Path)
				}
				got[f.Path] = f.Skipped
				if f.Skipped == "" {
					got[f.Path] = "content " + f.Content
				}
			}
			want := map[string]string{"leak.txt": "symlink", "etc": "symlink", "pipe.txt": "fifo", "ok.txt": "content ok"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("files %v, want %v", got, want)
			}
			return ctx
		}).Feature()
	testenv.Test(t, f)
}
