// Command sandbox-bench measures the sandbox service on the kind cluster
// (`make bench-kind`, which brings the cluster up first) and prints one
// table; the raw samples and a picture of the latency distributions go to
// bin/.
//
//	cd e2e && go run ./cmd/sandbox-bench [-out DIR] [-keep] [-phases floor,warm]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/e2e/bench"
	"github.com/sandboxd/sandbox/e2e/kindenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root, err := kindenv.RepoRoot()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("sandbox-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", filepath.Join(root, "bin"), "directory for bench-kind.json (raw samples) and bench-kind.png")
	keep := fs.Bool("keep", false, "keep the bench's namespace (client pod, logs) afterwards")
	only := fs.String("phases", "", "run only these phases, comma-separated (for example \"floor,warm\"); \"pod parts\", a sandbox pod's start cost split by part, runs only when named")
	compare := fs.String("compare", "", "also compare the warm path under each value of one of serve's environment variables, in turns: NAME=V1,V2 (for example SANDBOX_POD_CPU_REQUEST=10m,50m); or the kind node's CPU weights: "+bench.NodeWeights+"=as-built,default")
	rounds := fs.String("rounds", "", "the warm phase's rounds on full pools, per concurrency, in place of its defaults (for example 3=200, for a p99 of many samples)")
	compareOverload := fs.Duration("compare-overload", 0, "with -compare, also an overload of this length in each turn of each value (for example 60s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cmp bench.Compare
	if *compare != "" {
		if cmp, err = bench.ParseCompare(*compare); err != nil {
			return err
		}
	}
	var warmRounds map[int]int
	if *rounds != "" {
		if warmRounds, err = bench.ParseRounds(*rounds); err != nil {
			return err
		}
	}
	if *compareOverload > 0 && *compare == "" {
		return fmt.Errorf("-compare-overload needs -compare")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	env := kindenv.NewEnv(root, stderr)
	// kubectl comes from the cached Kubernetes build that `make kind-up` made.
	if env.Bins, err = (kindenv.Scripts{Root: root, Progress: stderr}).Binaries(ctx); err != nil {
		return err
	}
	if err := env.Attach(); err != nil {
		return fmt.Errorf("%w (make bench-kind brings it up; or run make kind-up)", err)
	}
	var phases []string
	if *only != "" {
		phases = strings.Split(*only, ",")
	}
	start := time.Now()
	err = bench.Run(ctx, bench.Options{Env: env, Out: *out, Log: stderr, Stdout: stdout, KeepNamespace: *keep, Phases: phases, Compare: cmp, CompareOverload: *compareOverload, Rounds: warmRounds})
	fmt.Fprintf(stderr, "=== bench took %s\n", time.Since(start).Round(time.Second))
	return err
}
