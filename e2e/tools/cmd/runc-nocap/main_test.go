package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSpecFile(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		wantFile    string
		wantProcess bool
	}{
		{"create with bundle", []string{"--root", "/r", "--log", "/l", "create", "--bundle", "/b", "id"}, "/b/config.json", false},
		{"run with bundle=", []string{"run", "--bundle=/b", "id"}, "/b/config.json", false},
		{"create in cwd", []string{"create", "id"}, "config.json", false},
		{"exec process", []string{"--root", "/r", "exec", "--process", "/p.json", "id"}, "/p.json", true},
		{"start has no spec", []string{"--root", "/r", "start", "id"}, "", false},
		{"global flag value is not the command", []string{"--log-format", "json", "delete", "id"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, isProcess := specFile(tc.args)
			if file != tc.wantFile || isProcess != tc.wantProcess {
				t.Fatalf("specFile(%q) = %q, %v; want %q, %v", tc.args, file, isProcess, tc.wantFile, tc.wantProcess)
			}
		})
	}
}

func TestStripCaps(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "config.json")
	in := `{"ociVersion":"1.0.2","process":{"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"]},"args":["sh"]},"root":{"path":"rootfs"}}`
	if err := os.WriteFile(spec, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := stripCaps(spec, false, map[string]bool{"CAP_SYS_RESOURCE": true}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	raw, _ := os.ReadFile(spec)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	caps := got["process"].(map[string]any)["capabilities"].(map[string]any)
	if !reflect.DeepEqual(caps["bounding"], []any{"CAP_CHOWN"}) || len(caps["effective"].([]any)) != 0 {
		t.Fatalf("capabilities after strip: %v", caps)
	}
	if got["root"].(map[string]any)["path"] != "rootfs" {
		t.Fatalf("other fields changed: %s", raw)
	}
	if fi, _ := os.Stat(spec); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode changed to %v", fi.Mode())
	}
}
