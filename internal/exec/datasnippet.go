package exec

// DataSnippet is what a data agent sends: a 100-row pandas frame,
// describe(), a matplotlib plot saved as PNG. It prints nothing, so that a
// caller can add its own output. The preload is measured with it: e2e's
// TestWarmPodsPreload and make bench-kind's data phase on kind, local's
// BenchmarkDataFloor on one machine, each against the same floor; it is
// here, beside the preload, so that both modules run the one snippet.
const DataSnippet = `import numpy as np, pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(100), "y": np.arange(100) ** 2})
df.describe()
df.plot(x="x", y="y")
plt.savefig("plot.png")
`
