"""Checkpoint files: ``torch.save`` with the NumPy arrays written from their own memory, atomically.

``torch.save`` pickles a NumPy array by value: its bytes go into the pickle stream, which is built
in memory and copied again into the file, so a checkpoint holding a replay memory of N bytes needs
several times N of extra memory while it is written.  A tensor's storage, instead, is written to
the file straight from its memory.  :func:`save` therefore pickles every array that owns its data
(and whose dtype torch holds) as the tensor sharing that memory (``torch.from_numpy``: no copy),
and the file loads it back as a NumPy array (``Tensor.numpy``): the same dtype, shape, strides and
values as the array saved.  Arrays that are views of others keep their usual pickling, so no two
loaded arrays share memory that did not share it as separate pickles before.

The file is written to a temporary name and moved over ``path``: a process killed while writing
keeps its previous checkpoint.
"""

from __future__ import annotations

import os
import pickle
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["load", "save"]


def _as_array(tensor: torch.Tensor) -> np.ndarray:
    """The array a tensor of :func:`save` stands for (on the CPU, sharing the tensor's memory)."""
    return tensor.cpu().numpy()


class _ArraysAsTensors(pickle.Pickler):
    """A pickler that writes each array owning its data as the tensor sharing it."""

    def reducer_override(self, obj: Any) -> Any:
        # views keep their own pickle; torch.from_numpy warns on a read-only array
        if type(obj) is not np.ndarray or obj.base is not None or not obj.flags.writeable:
            return NotImplemented
        try:
            tensor = torch.from_numpy(obj)
        except (TypeError, ValueError):  # a dtype torch does not hold (object, structured, byte order)
            return NotImplemented
        return _as_array, (tensor,)


_PICKLE = types.ModuleType("recipes.common.checkpoint_file.pickle")  # torch.save's pickle_module
_PICKLE.Pickler = _ArraysAsTensors  # type: ignore[attr-defined]


def save(path: str | Path, payload: Any) -> None:
    """Write ``payload`` to ``path`` (through a temporary file moved over it), its arrays as the
    tensors sharing their memory (see the module's docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp, pickle_module=_PICKLE)
    os.replace(tmp, path)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> Any:
    """The payload :func:`save` wrote to ``path`` (or any ``torch.save`` file): tensors on
    ``map_location``, arrays as arrays."""
    return torch.load(path, map_location=map_location, weights_only=False)
