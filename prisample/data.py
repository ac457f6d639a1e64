"""``IndexedDataset``: a dataset wrapper whose items say which slot they came from."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset, IterableDataset

from prisample._validation import short_repr

__all__ = ["IndexedDataset"]


class IndexedDataset(Dataset[tuple[Any, ...]]):
    """``IndexedDataset(ds)[i] == (i, *ds[i])`` (a non-tuple item ``x`` gives ``(i, x)``).

    The train step then knows which slots it drew and can feed their losses back with
    ``sampler.update_priorities(indices, losses)``; the data itself never enters the sampler.

    >>> IndexedDataset([("a", 0), ("b", 1)])[1]
    (1, 'b', 1)

    ``dataset`` must be map-style (indexable, ``dataset[i]``): anything else (a number, an
    iterator, an ``IterableDataset``, which has no indices to feed back) raises ``TypeError``
    naming it.
    """

    def __init__(self, dataset: Any) -> None:
        if isinstance(dataset, IterableDataset) or not hasattr(type(dataset), "__getitem__"):
            raise TypeError(
                "dataset should be a map-style dataset (one with dataset[i], such as a list or a "
                f"torch Dataset), but got dataset={short_repr(dataset)} of type {type(dataset).__name__}"
            )
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        item = self.dataset[index]
        if isinstance(item, tuple):
            return (index, *item)
        return (index, item)
