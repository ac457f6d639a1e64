"""One optimiser step of a loss, run eagerly or captured once as a CUDA graph and replayed.

A DQN update is the same few hundred kernels every time, on inputs of the same shapes: launching
them one by one from Python costs more than running them on a modern GPU (the Nature-CNN Double
DQN update of ``recipes/dqn/run.py`` took 4.8 ms eagerly on an H100 and 0.8 ms as a graph).
:class:`OptimizerStep` captures ``loss = f(batch); loss.backward(); optimizer.step()`` into a
``torch.cuda.CUDAGraph`` on its first call and replays it after copying each new batch into the
graph's static input buffers; on a CPU, or with ``graph=False``, it runs the same three lines
eagerly.  Both give the same parameters (``tests/test_dqn_update.py``; on a GPU
``benchmarks/gpu_check.py`` compares them).

Capture follows PyTorch's whole-network recipe: warm-up steps on a side stream (which also let
cuDNN pick its kernels and let the optimiser create its state), then capture with the gradients
set to ``None`` so that the graph's backward allocates and overwrites them.  The warm-up steps
change the parameters and the optimiser's state; both are put back in place afterwards, so the
first replayed update starts from exactly the state the caller built.  The optimiser must be
capturable: its step may hold no Python-side state that changes between steps (``DQNRMSprop``
qualifies; ``torch.optim.Adam``/``RMSprop`` need ``capturable=True``).

Around the step: :func:`as_batch` puts a sampled minibatch on the networks' device,
:class:`GraphedForward` is acting's forward as a graph, and :class:`HostCopy` brings the update's
outputs (the new priorities) back to the host without waiting for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import torch

LossFn = Callable[[Sequence[torch.Tensor]], tuple[torch.Tensor, ...]]
"""``f(batch) -> (loss, *outputs)``: the first tensor is minimised, the others returned as well."""

AfterFn = Callable[[tuple[torch.Tensor, ...]], None]
"""``after(outputs)``: device work done after the optimiser step, in the same graph (e.g. the new
priorities written into a device replay)."""


class DeviceState(Protocol):
    """State outside θ and the optimiser that a step changes on the device and that the warm-up
    steps before a capture must leave as they found it, plus the host side a graph cannot replay
    (:class:`~prisample.replay.PrioritizedReplay` with ``backend="device_*"`` is one)."""

    def save_device_step(self) -> Any: ...

    def restore_device_step(self, saved: Any) -> None: ...

    def stage_device_step(self) -> None: ...


_WARMUP_STEPS = 3


class Batch(NamedTuple):
    """One minibatch as tensors on the networks' device (``draw.weights`` as ``weights``)."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    next_obs: torch.Tensor
    weights: torch.Tensor


def as_batch(sample: Any, weights: Any, device: torch.device) -> Batch:
    """The replay's sample as a :class:`Batch` on ``device``: a copy from host arrays, nothing for
    tensors already there (a replay that samples on the device)."""

    def put(value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.as_tensor(value, device=device, dtype=dtype)

    return Batch(
        put(sample["obs"]),
        put(sample["action"]),
        put(sample["reward"], torch.float32),
        put(sample["discount"], torch.float32),
        put(sample["next_obs"]),
        put(weights),
    )


class OptimizerStep:
    """``outputs = f(batch); θ ← optimizer.step(∇_θ loss)`` per call, eagerly or as a CUDA graph.

    ``loss_fn(batch)`` returns ``(loss, *outputs)``; a call returns ``(loss, *outputs)`` detached.
    With a graph those are the graph's static output tensors: read (or copy) them before the next
    call, which overwrites them.  Every call must pass tensors of the first call's shapes and
    dtypes, on the parameters' device.

    ``after(outputs)`` runs after the optimiser step, inside the graph.  ``state`` is what else the
    step changes on the device (a device replay, whose draw may happen inside ``loss_fn``): saved
    before the warm-up steps and restored after them, and staged before every replay of the graph.
    """

    def __init__(
        self,
        loss_fn: LossFn,
        params: Sequence[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        *,
        graph: bool,
        after: AfterFn | None = None,
        state: DeviceState | None = None,
    ) -> None:
        self.loss_fn = loss_fn
        self.params = list(params)
        self.optimizer = optimizer
        self.after = after
        self.state = state
        self.graph_requested = graph
        self._graph: torch.cuda.CUDAGraph | None = None
        self._inputs: list[torch.Tensor] = []
        self._outputs: tuple[torch.Tensor, ...] = ()

    @property
    def captured(self) -> bool:
        """Whether calls replay a captured CUDA graph."""
        return self._graph is not None

    def __call__(self, batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        if not self.graph_requested:
            return self._eager(batch)
        if self._graph is None:
            self._capture(batch)
        else:
            self._check(batch)
            for static, value in zip(self._inputs, batch, strict=True):
                static.copy_(value, non_blocking=True)
        assert self._graph is not None
        if self.state is not None:
            self.state.stage_device_step()
        self._graph.replay()
        return self._outputs

    def _eager(self, batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        loss, *outputs = self.loss_fn(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        self.optimizer.step()
        detached = (loss.detach(), *(o.detach() for o in outputs))
        if self.after is not None:
            self.after(detached)
        return detached

    def _check(self, batch: Sequence[torch.Tensor]) -> None:
        if len(batch) != len(self._inputs):
            raise ValueError(f"batch should hold {len(self._inputs)} tensors, but got {len(batch)}")
        for i, (static, value) in enumerate(zip(self._inputs, batch, strict=True)):
            if value.shape != static.shape or value.dtype != static.dtype:
                raise ValueError(
                    f"batch[{i}] should be {tuple(static.shape)} {static.dtype} as when captured, but got "
                    f"{tuple(value.shape)} {value.dtype}"
                )

    def _capture(self, batch: Sequence[torch.Tensor]) -> None:
        device = self.params[0].device
        if device.type != "cuda":
            raise ValueError(f"graph=True needs parameters on a CUDA device, but they are on {device}")
        self._inputs = [value.detach().clone() for value in batch]
        saved_params = [p.detach().clone() for p in self.params]
        saved_state = _optimizer_tensors(self.optimizer)
        saved_device = None if self.state is None else self.state.save_device_step()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves Stream.__new__ unannotated
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(_WARMUP_STEPS):
                self._eager(self._inputs)
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():  # the warm-up steps were not updates: put θ and the optimiser back
            for p, saved in zip(self.params, saved_params, strict=True):
                p.copy_(saved)
            _restore_optimizer(self.optimizer, saved_state)
            if self.state is not None:
                self.state.restore_device_step(saved_device)
                self.state.stage_device_step()  # what the capture records reads the staged values
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._outputs = self._eager(self._inputs)
        if self.state is not None:  # the capture ran no step: the first replay stages afresh
            self.state.restore_device_step(saved_device)
        self._graph = graph


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[int, dict[str, Any]]:
    """Copies of the optimiser's per-parameter state tensors, keyed by ``id(param)``."""
    saved: dict[int, dict[str, Any]] = {}
    for p, state in optimizer.state.items():
        saved[id(p)] = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in state.items()}
    return saved


def _restore_optimizer(optimizer: torch.optim.Optimizer, saved: dict[int, dict[str, Any]]) -> None:
    """In place: state that existed before the warm-up gets its values back; state the warm-up
    created is zeroed, which is what a first step creates it as (zero moments, zero step count)."""
    for p, state in optimizer.state.items():
        before = saved.get(id(p))
        for key, value in state.items():
            if not torch.is_tensor(value):
                if before is not None and key in before:
                    state[key] = before[key]
                continue
            if before is not None and key in before:
                value.copy_(before[key])
            else:
                value.zero_()


class GraphedForward:
    """``module(x)`` without gradients, captured as a CUDA graph on its first call (one input shape).

    Acting calls the Q-network on a handful of observations per environment step: a launch-bound
    forward whose kernels a graph replays at once.  The graph reads the module's parameters where
    they are, so in-place updates (:class:`OptimizerStep`, ``load_state_dict``) are seen.  The
    returned tensor is the graph's static output: read it before the next call.  Eager on a CPU.
    """

    def __init__(self, module: torch.nn.Module, *, graph: bool) -> None:
        self.module = module
        self.graph_requested = graph
        self._graph: torch.cuda.CUDAGraph | None = None
        self._input: torch.Tensor | None = None
        self._output: torch.Tensor | None = None

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.graph_requested:
            return self.module(x)  # type: ignore[no-any-return]
        if self._graph is None:
            self._input = x.clone()
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves Stream.__new__ unannotated
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(_WARMUP_STEPS):
                    self.module(self._input)
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._output = self.module(self._input)
        else:
            assert self._input is not None
            if x.shape != self._input.shape or x.dtype != self._input.dtype:
                raise ValueError(
                    f"x should be {tuple(self._input.shape)} {self._input.dtype} as when captured, but got "
                    f"{tuple(x.shape)} {x.dtype}"
                )
            self._input.copy_(x, non_blocking=True)
        self._graph.replay()
        assert self._output is not None
        return self._output


class HostCopy:
    """Device tensors copied to the host without waiting for them: :meth:`start` queues the copy
    behind the work that computes them, :meth:`Pending.wait` blocks only when the values are read.

    A loop that launches an update, then stores the next transitions while the GPU computes it,
    and only then reads the new priorities, keeps the CPU and the GPU busy at the same time.  On
    a CPU the copy is done at once.  ``buffers`` pinned host buffers are used in turn, so at most
    that many copies may be pending at once.
    """

    def __init__(self, device: torch.device, buffers: int = 2) -> None:
        self.device = device
        self.buffers = buffers
        self._pinned: list[torch.Tensor | None] = [None] * buffers
        self._next = 0

    def start(self, *tensors: torch.Tensor) -> Pending:
        """Queue the copy of ``tensors`` (flattened, concatenated, as float32) to the host."""
        flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors])
        if self.device.type != "cuda":
            return Pending(flat.numpy(), None)
        i = self._next
        self._next = (i + 1) % self.buffers
        pinned = self._pinned[i]
        if pinned is None or pinned.numel() != flat.numel():
            pinned = torch.empty(flat.numel(), dtype=torch.float32, pin_memory=True)
            self._pinned[i] = pinned
        pinned.copy_(flat, non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves Event.__new__ unannotated
        event.record()
        return Pending(pinned.numpy(), event)


class Pending:
    """Values on their way to the host (:class:`HostCopy`): :meth:`wait` returns them."""

    def __init__(self, host: Any, event: torch.cuda.Event | None) -> None:
        self._host = host
        self._event = event

    def wait(self) -> Any:
        """The values as one flat float32 numpy array (a copy: the buffer is reused)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host.copy()
