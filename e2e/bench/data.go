package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox/e2e/kindenv"
)

// The data phase: how many turns of each setting of the preload, and the
// requests of each kind at concurrency 1 in a turn.
const (
	dataTurns  = 2
	dataRounds = 8
	// dataSettle is left after the pools are full and before each request:
	// a warm pod preloads in about a CPU-second once Ready, and an agent's
	// next request rarely follows its last within that. Both settings wait
	// alike.
	dataSettle = 3 * time.Second
	// preloadEnv is serve's setting of the snippet pods' preload; "" is none.
	preloadEnv = "SANDBOX_PRELOAD"
	// preloadAlwaysEnv is serve's --preload-always.
	preloadAlwaysEnv = "SANDBOX_PRELOAD_ALWAYS"
)

// measureData sets side by side, in one run, a data agent's snippet
// (kindenv.DataSnippet) and print(1) through /v1/execute with serve's
// preload as deployed and with none, in turns, and the same snippet in the
// client pod's python3 twice: fresh, and with its imports already done
// (the floor a preload can reach). It leaves the preload as it found it.
func (b *Bench) measureData(ctx context.Context) error {
	// The preload as deployed: the manifests' value, or serve's default
	// when they set none (then removing the variable restores it).
	deployed, was := deploymentEnvOf(ctx, b)[preloadEnv]
	asDeployed := preloadEnv + "-"
	if was {
		asDeployed = preloadEnv + "=" + deployed
	}
	_, restore := b.serveEnvSetter(ctx, preloadEnv)
	defer func() {
		if err := restore(context.WithoutCancel(ctx)); err != nil {
			b.logf("restore %s: %v", preloadEnv, err)
		}
	}()
	settings := []struct{ name, assignment string }{{"preloaded", asDeployed}, {"no preload", preloadEnv + "="}}
	got := map[string][]Sample{}
	for turn := range dataTurns {
		for _, st := range settings {
			if turn > 0 || st.assignment != asDeployed {
				if err := b.setServeEnv(ctx, st.assignment); err != nil {
					return err
				}
			}
			for _, what := range []struct{ kind, code string }{{"data", kindenv.DataSnippet}, {"print", ""}} {
				for range dataRounds {
					if err := b.waitFull(ctx); err != nil {
						return err
					}
					time.Sleep(dataSettle)
					var code []string
					if what.code != "" {
						code = append(code, what.code)
					}
					s, err := b.load(ctx, fmt.Sprintf("%s, %s", what.kind, st.name), b.url, 1, 1, code...)
					if err != nil {
						return err
					}
					got[what.kind+"/"+st.name] = append(got[what.kind+"/"+st.name], s...)
				}
			}
		}
	}
	fresh, err := b.runClient(ctx, "data, fresh python3", "fresh", strconv.Itoa(dataRounds), kindenv.DataSnippet)
	if err != nil {
		return err
	}
	imported, err := b.runClient(ctx, "data, imports done", "imported", strconv.Itoa(2*dataRounds), kindenv.DataSnippet)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d at concurrency 1, in turns with the other setting; each %s after the pools were full", dataTurns*dataRounds, dataSettle)
	for _, st := range settings {
		d, p := got["data/"+st.name], got["print/"+st.name]
		b.samples = append(b.samples, d...)
		b.samples = append(b.samples, p...)
		b.rows = append(b.rows,
			Row{What: "data snippet, warm /v1/execute, " + st.name, MS: latencies(d, false), Note: note + failures(d)},
			Row{What: "  part: the snippet's run (duration_ms)", MS: timings(d, "run")},
			Row{What: "print(1), warm /v1/execute, " + st.name, MS: latencies(p, false), Note: note + failures(p)})
	}
	b.samples = append(b.samples, fresh...)
	b.samples = append(b.samples, imported...)
	b.rows = append(b.rows,
		Row{What: "data snippet, a fresh python3 in a pod", MS: latencies(fresh, true), Note: "the client pod, spawn to exit" + failures(fresh)},
		Row{What: "data snippet, a pod's python3 with its imports done", MS: latencies(imported, true), Note: "the client pod, exec() of the snippet" + failures(imported)})
	return nil
}
