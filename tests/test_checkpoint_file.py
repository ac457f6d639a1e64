"""Checkpoint files (recipes/common/checkpoint_file.py): arrays written from their own memory load
back exactly, the pickle stream holds none of their bytes, a failed write keeps the previous file,
and files of plain ``torch.save`` still load."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from recipes.common import checkpoint_file

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
DTYPES += [np.complex64, np.complex128, np.uint16, np.uint32, np.uint64]


@dataclass
class Holder:
    """An object whose attribute is an array (as the loop state's observations)."""

    obs: np.ndarray


def _same(x: Any, y: Any) -> bool:
    """Equal in type, dtype, shape, strides and values, recursively (NaN equal to NaN)."""
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(map(_same, x, y))
    if isinstance(x, np.ndarray):
        nan = x.dtype.kind in "fc"
        same_values = np.array_equal(x, y, equal_nan=nan) if x.dtype.fields is None else bool((x == y).all())
        strides = x.size == 0 or x.strides == y.strides  # an empty array's strides carry nothing
        return x.dtype == y.dtype and x.shape == y.shape and strides and same_values
    if isinstance(x, torch.Tensor):
        return x.dtype == y.dtype and bool(torch.equal(x, y))
    if isinstance(x, Holder):
        return _same(x.obs, y.obs)
    return bool(x == y)


def _payload() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    arrays = {np.dtype(d).name: (rng.random((3, 4)) * 100).astype(d) for d in DTYPES}
    arrays["float64"][0, 0] = np.nan
    frozen = np.arange(5)
    frozen.flags.writeable = False
    pool = np.arange(20, dtype=np.int32)
    return {
        "arrays": arrays,
        "fortran": np.asfortranarray(rng.random((4, 3))),
        "scalar_array": np.array(7.5),
        "empty": np.zeros((0, 3), np.float32),
        "objects": np.array([1, "a", None], dtype=object),
        "structured": np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
        "frozen": frozen,
        "pool": pool,
        "view": pool[5:9],
        "held": Holder(rng.integers(0, 255, (2, 2), dtype=np.uint8)),
        "tensor": torch.arange(6.0).reshape(2, 3),
        "numpy_scalar": np.float32(1.5),
        "rng": np.random.default_rng(3).bit_generator.state,
    }


def test_every_array_and_object_loads_back_exactly(tmp_path: Path) -> None:
    payload = _payload()
    payload["again"] = payload["pool"]  # one object twice: one object after loading
    checkpoint_file.save(tmp_path / "ck.pt", payload)
    loaded = checkpoint_file.load(tmp_path / "ck.pt")
    assert _same(payload, loaded)
    assert loaded["again"] is loaded["pool"]
    assert not np.shares_memory(loaded["view"], loaded["pool"])  # a view pickled on its own, as before
    loaded["pool"][0] = -1  # a loaded array is an ordinary, writable array
    assert loaded["pool"][0] == -1


def test_an_array_torch_cannot_hold_is_pickled_as_before(tmp_path: Path) -> None:
    """A non-native byte order goes through ``torch.save``'s own pickling (values kept)."""
    swapped = np.arange(4, dtype=">f8")
    checkpoint_file.save(tmp_path / "ck.pt", {"swapped": swapped})
    np.testing.assert_array_equal(checkpoint_file.load(tmp_path / "ck.pt")["swapped"], swapped)


def test_the_pickle_stream_holds_no_array_bytes(tmp_path: Path) -> None:
    """The arrays are written as storages: the pickled part of the file stays small whatever
    their size (plain ``torch.save`` puts every array's bytes into it)."""
    big = {"memory": np.ones((1 << 20,), dtype=np.uint8), "priorities": np.ones(1 << 16)}
    checkpoint_file.save(tmp_path / "ck.pt", big)
    with zipfile.ZipFile(tmp_path / "ck.pt") as archive:
        pickled = next(i.file_size for i in archive.infolist() if i.filename.endswith("data.pkl"))
    assert pickled < 4096
    assert _same(big, checkpoint_file.load(tmp_path / "ck.pt"))


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ck.pt"
    checkpoint_file.save(path, {"step": 1, "obs": np.zeros(3)})
    with pytest.raises(Exception, match="pickle"):
        checkpoint_file.save(path, {"step": 2, "unpicklable": lambda: None})
    assert _same(checkpoint_file.load(path), {"step": 1, "obs": np.zeros(3)})


def test_a_plain_torch_save_file_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before this module (plain ``torch.save``) load unchanged."""
    payload = _payload()
    torch.save(payload, tmp_path / "old.pt")
    assert _same(payload, checkpoint_file.load(tmp_path / "old.pt"))
