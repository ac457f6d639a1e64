"""Every batch dataclass reads as a mapping through one implementation,
:class:`prisample.replay.batch.BatchMapping`: ``ReplayBatch`` and ``prisample.ray.RemoteBatch`` each
once wrote ``__getitem__``, ``__iter__`` and ``__len__`` again, so a change to one (a key, the error
message) left the other behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest

from prisample.replay.batch import FIELDS, BatchMapping, ReplayBatch


def _replay_batch() -> ReplayBatch:
    k = 3
    return ReplayBatch(
        np.zeros((k, 2)),
        np.zeros(k, np.int64),
        np.ones(k, np.float32),
        np.ones(k, np.float32),
        np.zeros((k, 2)),
        np.arange(k, dtype=np.int64),
        {"log_prob": np.zeros(k, np.float32)},
        weights=np.ones(k, np.float32),
    )


def test_replay_batch_reads_its_fields_then_its_extras() -> None:
    batch = _replay_batch()
    assert list(batch) == [*FIELDS, "log_prob"] and len(batch) == len(FIELDS) + 1
    assert batch["generation"] is batch.generation and batch["log_prob"] is batch.extras["log_prob"]
    assert "weights" not in batch  # the draw's weights are not a key
    with pytest.raises(KeyError, match=r"batch has no field or extra 'weights'; it has \['obs'"):
        batch["weights"]


def test_readable_fields_are_read_by_key_but_are_not_keys() -> None:
    @dataclass(frozen=True, eq=False)
    class Tagged(BatchMapping):
        a: int
        tag: str
        extras: dict[str, Any] = field(default_factory=dict)

        mapped_fields: ClassVar[tuple[str, ...]] = ("a",)
        readable_fields: ClassVar[tuple[str, ...]] = ("tag",)

    batch = Tagged(1, "t", {"x": 2})
    assert dict(batch) == {"a": 1, "x": 2} and len(batch) == 2
    assert batch["tag"] == "t" and "tag" not in list(batch)


def test_the_remote_batch_is_the_same_mapping() -> None:
    pytest.importorskip("ray")
    from prisample.ray import TRANSITION_FIELDS, RemoteBatch

    for method in ("__getitem__", "__iter__", "__len__"):
        assert getattr(RemoteBatch, method) is getattr(BatchMapping, method), method
    k = 2
    ints = np.arange(k, dtype=np.int64)
    batch = RemoteBatch(
        np.zeros((k, 2)),
        ints,
        np.ones(k, np.float32),
        np.ones(k, np.float32),
        np.zeros((k, 2)),
        weights=np.ones(k, np.float32),
        probabilities=np.full(k, 0.5),
        shards=ints,
        slots=ints,
        generation=ints,
        extras={"log_prob": np.zeros(k, np.float32)},
    )
    assert list(batch) == [*TRANSITION_FIELDS, "log_prob"] and len(batch) == len(TRANSITION_FIELDS) + 1
    for key in ("weights", "probabilities", "shards", "slots", "generation"):
        assert batch[key] is getattr(batch, key) and key not in list(batch)
    with pytest.raises(KeyError, match="batch has no field or extra 'mask'"):
        batch["mask"]
