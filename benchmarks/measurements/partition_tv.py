import numpy as np

from prisample.rank import power_law_partition

ALPHA = 0.7
for n in (2**14, 2**17, 2**20):
    exact = np.arange(1, n + 1, dtype=np.float64) ** -ALPHA
    exact /= exact.sum()
    row = []
    for segments in (min(n, 1024), 32):
        starts, mass = power_law_partition(n, ALPHA, segments)
        density = np.repeat(mass / np.diff(starts), np.diff(starts))
        row.append(f"{len(mass)} segments: TV {0.5 * np.abs(density - exact).sum():.2e}")
    print(f"N=2^{n.bit_length() - 1}: " + "; ".join(row))
