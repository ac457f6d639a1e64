import numpy as np
from torch.utils.data import DataLoader

from prisample import IndexedDataset, PrioritizedSampler

N, T = 1000, 4
for sb, lb in ((32, 16), (16, 32)):
    sampler = PrioritizedSampler(N, alpha=1.0, eps=1e-9, batch_size=sb, seed=0)
    sampler.update_priorities([0], [0.0])
    res: tuple[int, float] | None = None
    for t, (indices, _) in enumerate(
        DataLoader(IndexedDataset(list(range(N))), sampler=sampler, batch_size=lb)
    ):
        if t == T:
            sampler.update_priorities(np.arange(N), np.zeros(N))
            sampler.update_priorities([0], [1e12])
        if t > T and (indices == 0).any():
            res = (t - T - 1, (indices == 0).float().mean().item())
            break
    assert res is not None, "slot 0 was never drawn after the update"
    print(
        f"sampler batch_size={sb}, loader batch_size={lb}: lag {res[0]}, "
        f"share of slot 0 in first affected batch {res[1]}"
    )
