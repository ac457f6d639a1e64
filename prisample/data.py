"""``IndexedDataset``: a dataset wrapper whose items say which slot they came from."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

__all__ = ["IndexedDataset"]


class IndexedDataset(Dataset[tuple[Any, ...]]):
    """``IndexedDataset(ds)[i] == (i, *ds[i])`` (a non-tuple item ``x`` gives ``(i, x)``).

    The train step then knows which slots it drew and can feed their losses back with
    ``sampler.update_priorities(indices, losses)``; the data itself never enters the sampler.

    >>> IndexedDataset([("a", 0), ("b", 1)])[1]
    (1, 'b', 1)
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        item = self.dataset[index]
        if isinstance(item, tuple):
            return (index, *item)
        return (index, item)
