package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// TestCgroupOOM runs a memory bomb in a memory cgroup of its own and checks
// that the kernel's OOM kill is reported. The runner must live in that cgroup
// to read its counter, so the test re-executes itself as the runner, moves it
// into a fresh child cgroup with a 96 MiB limit, and then lets it run the job.
// It needs root and a writable cgroup v1 memory hierarchy; elsewhere (and in
// the pod, where the runner cannot make cgroups) it is skipped.
func TestCgroupOOM(t *testing.T) {
	if os.Getenv("SANDBOX_OOM_HELPER") != "" {
		oomHelper()
		return
	}
	dir, v2 := memCgroup()
	if os.Geteuid() != 0 || dir == "" || v2 {
		t.Skip("needs root and a cgroup v1 memory controller")
	}
	cg, err := os.MkdirTemp(dir, "sandbox-oom-test-")
	if err != nil {
		t.Skipf("cannot make a memory cgroup: %v", err)
	}
	defer func() {
		// The cgroup can go once its processes have.
		for range 50 {
			if os.Remove(cg) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", cg)
	}()
	const limit = 96 << 20
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		err := os.WriteFile(filepath.Join(cg, f), []byte(strconv.Itoa(limit)), 0o644)
		if err != nil && f == "memory.limit_in_bytes" {
			t.Skipf("cannot limit the cgroup: %v", err)
		}
	}

	helper := osexec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCgroupOOM$")
	helper.Env = append(os.Environ(), "SANDBOX_OOM_HELPER=1")
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	helper.Stdout = &out
	helper.Stderr = &out
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(helper.Process.Pid)), 0o644); err != nil {
		helper.Process.Kill()
		helper.Wait()
		t.Skipf("cannot move a process into the cgroup: %v", err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := helper.Wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out.String())
	}
	_, js, ok := strings.Cut(out.String(), "RESULT ")
	var res wire.Result
	if !ok || json.Unmarshal([]byte(strings.SplitN(js, "\n", 2)[0]), &res) != nil {
		t.Fatalf("no result from the helper:\n%s", out.String())
	}
	if !res.OOMKilled || res.ExitCode != 137 || !strings.HasSuffix(res.Stderr, "killed: out of memory (limit 96 MiB)\n") {
		t.Errorf("result = %+v, want an OOM kill reported", res)
	}
}

// oomHelper is the runner half of TestCgroupOOM: it waits to be moved into
// the cgroup, runs the bomb, and prints the result.
func oomHelper() {
	var b [3]byte
	os.Stdin.Read(b[:])
	dir, _ := os.MkdirTemp("", "sandbox-oom-")
	defer os.RemoveAll(dir)
	res, err := Run(context.Background(), Job{Code: "print('allocating')\nx = 'x' * (1 << 30)\n", Timeout: 30 * time.Second}, Options{Dir: dir})
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	js, _ := json.Marshal(res)
	fmt.Printf("RESULT %s\n", js)
}
