"""A guard for tests of device code run on CPU tensors: inside :func:`no_host_sync`, every call
that would make the host wait for a device (a tensor's value read on the host, a copy to the
host, a shape that depends on the data) raises :class:`HostSyncError`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

# What waits for a device: a tensor read on the host (a value, a list, a truth value, a copy to
# the host) or a shape that depends on the data (nonzero).
_SYNCING = ("item", "tolist", "cpu", "__bool__", "__int__", "__float__", "nonzero")


class HostSyncError(AssertionError):
    """A call that would synchronise with the device was made."""


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Make every call in :data:`_SYNCING` (and ``torch.nonzero``) raise :class:`HostSyncError`."""

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise HostSyncError(f"host synchronisation: {name}")

        return call

    saved = {name: getattr(torch.Tensor, name) for name in _SYNCING}
    saved_nonzero = torch.nonzero
    try:
        for name in _SYNCING:
            setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
        torch.nonzero = refuse("torch.nonzero")
        yield
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        torch.nonzero = saved_nonzero
