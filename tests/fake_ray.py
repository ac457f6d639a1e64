"""An in-process stand-in for the part of Ray that prisample.ray uses: ``remote`` classes whose
method calls run at once, ``get``, ``wait``, ``kill``.  Arguments and results go through pickle,
as they would between processes, so the math of the remote memory is tested in milliseconds;
tests/test_ray_replay.py also runs the real thing."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any


class RayTaskError(Exception):
    """What ``get`` raises for a call that failed: the shard's own error in ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ObjectRef:
    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


class _Method:
    def __init__(self, bound: Any) -> None:
        self.bound = bound

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
        try:
            return ObjectRef(pickle.loads(pickle.dumps(self.bound(*args, **kwargs))))
        except Exception as error:
            return ObjectRef(error=error)


class _Handle:
    def __init__(self, instance: Any) -> None:
        self._instance = instance

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._instance, name))


class _RemoteClass:
    def __init__(self, cls: type) -> None:
        self.cls = cls

    def options(self, **_: Any) -> _RemoteClass:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> _Handle:
        return _Handle(self.cls(*args, **kwargs))


def remote(cls: type) -> _RemoteClass:
    return _RemoteClass(cls)


def get(refs: Any) -> Any:
    if isinstance(refs, list):
        return [get(ref) for ref in refs]
    if refs.error is not None:
        raise RayTaskError(refs.error)
    return refs.value


def wait(refs: list[ObjectRef], num_returns: int = 1) -> tuple[list[ObjectRef], list[ObjectRef]]:
    return refs[:num_returns], refs[num_returns:]


def kill(handle: Any) -> None:
    pass


def is_initialized() -> bool:
    return True


exceptions = SimpleNamespace(RayTaskError=RayTaskError)
