"""Devices named as the tensors made on them report them.

``torch.device("cuda") == torch.device("cuda:0")`` is ``False``, and so is ``torch.device("cpu:0")
== torch.device("cpu")``, while a tensor made on ``"cuda"`` reports ``cuda:<current index>`` and
one made on ``"cpu:0"`` reports ``cpu``.  A device is normalised once, where it enters (a
constructor's ``device=``, a recipe's ``--device``), so that a comparison with a tensor's
``.device`` later means "the same device".
"""

from __future__ import annotations

import torch

__all__ = ["concrete_device"]


def concrete_device(device: torch.device | str) -> torch.device:
    """The device that tensors made on ``device`` report: ``cpu`` for every CPU device (``"cpu:0"``
    included), ``cuda:<current index>`` for ``"cuda"``, the device itself where it names an index.
    A CUDA device without CUDA is returned as given (whoever uses it raises)."""
    device = torch.device(device)
    if device.type == "cpu":
        return torch.device("cpu")
    if device.index is not None:
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return device
        return torch.device("cuda", torch.cuda.current_device())
    try:  # another accelerator (mps, xpu, ...): ask it which index a tensor gets
        return torch.empty(0, device=device).device
    except RuntimeError:
        return device
