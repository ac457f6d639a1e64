import numpy as np

from prisample import PrioritizedSampler

# 1. Rank backend: observed frequencies against the reported probabilities.
n, batches = 5000, 20000
s = PrioritizedSampler(n, alpha=0.7, backend="rank", seed=1)
s.update_priorities(np.arange(n), np.random.default_rng(0).random(n))
p = s.probabilities(np.arange(n))
counts = np.zeros(n)
for _ in range(batches):
    np.add.at(counts, s.sample(32).indices, 1)
noise = 0.5 * np.sqrt(2 / np.pi) * np.sqrt(p * (1 - p) / counts.sum()).sum()  # E[TV] of pure noise
print(
    f"rank N={n}, {int(counts.sum())} draws: TV(observed, reported) "
    f"{0.5 * np.abs(counts / counts.sum() - p).sum():.3f}, expected from noise {noise:.3f}"
)

# 2. Rank backend after a DQN-like workload: reported probabilities against the exact power law.
for n in (2**14, 2**17):
    rng = np.random.default_rng(0)
    s = PrioritizedSampler(n, alpha=0.7, backend="rank", seed=0)
    s.update_priorities(np.arange(n), np.abs(rng.standard_normal(n)))
    for step in range(200):
        d = s.sample(32)
        s.update_priorities(d.indices, np.abs(rng.standard_normal(32)))
        s.add((8 * step + np.arange(8)) % n)
    order = np.lexsort((np.arange(n), -s.priorities))
    exact = np.empty(n)
    exact[order] = np.arange(1, n + 1) ** -0.7 / (np.arange(1, n + 1) ** -0.7).sum()
    print(
        f"rank N=2^{n.bit_length() - 1}: TV(reported, exact) "
        f"{0.5 * np.abs(s.probabilities(np.arange(n)) - exact).sum():.2e}"
    )

# 3. 'memory' normalisation with one zero-error slot (proportional, alpha=0.6, eps=1e-6).
for beta in (0.4, 1.0):
    s = PrioritizedSampler(1000, alpha=0.6, eps=1e-6, beta=beta, seed=0)
    s.update_priorities([0], [0.0])
    print(f"beta={beta}: weight of a |delta|=1 slot {float(s.weights([1])[0]):.2g}")
