from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from prisample import IndexedDataset, PrioritizedSampler

N, B, T = 1000, 16, 5


def lag(**loader_kwargs: Any) -> int | None:
    sampler = PrioritizedSampler(N, alpha=1.0, eps=1e-9, batch_size=B, seed=0)
    sampler.update_priorities(np.arange(N), np.ones(N))
    sampler.update_priorities([0], [0.0])  # slot 0 is (almost) never drawn before the update
    loader = DataLoader(IndexedDataset(list(range(N))), sampler=sampler, batch_size=B, **loader_kwargs)
    for t, (indices, _) in enumerate(loader):
        if t == T:  # the train step of batch T makes slot 0 dominant
            sampler.update_priorities(np.arange(N), np.full(N, 0.0))
            sampler.update_priorities([0], [1e12])
        if t > T and (indices == 0).all():
            return t - T - 1  # batches T+1 .. t-1 were drawn before the update
    return None


if __name__ == "__main__":
    print("num_workers=0:", lag(num_workers=0))
    print("num_workers=2, prefetch_factor=2:", lag(num_workers=2, prefetch_factor=2))
    print("num_workers=1, prefetch_factor=3:", lag(num_workers=1, prefetch_factor=3))
    print("num_workers=3, prefetch_factor=1:", lag(num_workers=3, prefetch_factor=1))
