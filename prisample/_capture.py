"""Whether the calling thread is capturing a CUDA graph.

A captured graph replays its kernels without running Python, so the host side of a device draw
(β at the current step, rows added since the last read, the ring's tail) cannot run inside it.
The device sampler and replay run that host side eagerly before their tensor work, and skip it
while capturing: the caller then stages it before every replay
(:meth:`~prisample.replay.PrioritizedReplay.stage_device_step`), as PyTorch's own capturable
optimisers keep their step counts on the device.

:func:`recording` makes the device code behave as it does under a capture on any device (the
host side skipped), so that what a graph would replay can be run and checked on CPU tensors.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

__all__ = ["capturing", "recording"]

_local = threading.local()


def capturing() -> bool:
    """``True`` inside ``torch.cuda.graph(...)`` on this thread's current stream, or inside
    :func:`recording` on this thread."""
    if getattr(_local, "recording", False):
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Run the enclosed device calls as a CUDA graph capture records them, on any device: the
    host side of each draw and read is skipped (stage it first, as before a graph's replay)."""
    before = getattr(_local, "recording", False)
    _local.recording = True
    try:
        yield
    finally:
        _local.recording = before
