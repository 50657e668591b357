package kindenv

// DataSnippet is what a data agent sends: a 100-row pandas frame,
// describe(), a matplotlib plot saved as PNG. It prints nothing, so that a
// test can add its own output; TestWarmPodsPreload and the bench's data
// phase both run it.
const DataSnippet = `import numpy as np, pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(100), "y": np.arange(100) ** 2})
df.describe()
df.plot(x="x", y="y")
plt.savefig("plot.png")
`
