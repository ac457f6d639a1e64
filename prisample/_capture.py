"""Whether the calling thread is capturing a CUDA graph.

A captured graph replays its kernels without running Python, so the host side of a device draw
(β at the current step, rows added since the last read, the ring's tail) cannot run inside it.
The device sampler and replay run that host side eagerly before their tensor work, and skip it
while capturing: the caller then stages it before every replay
(:meth:`~prisample.replay.PrioritizedReplay.stage_device_step`), as PyTorch's own capturable
optimisers keep their step counts on the device.
"""

from __future__ import annotations

import torch

__all__ = ["capturing"]


def capturing() -> bool:
    """``True`` inside ``torch.cuda.graph(...)`` on this thread's current stream."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
