"""Prioritized replay for Stable-Baselines3's DQN: a ``ReplayBuffer`` subclass and a ``DQN`` subclass.

Schaul et al. (2016), Algorithm 1, inside SB3's own loop:

* :class:`PrioritizedReplayBuffer` keeps SB3's storage (its arrays of shape ``(buffer_size, n_envs,
  ...)``, ``optimize_memory_usage``, ``handle_timeout_termination``) and puts a
  :class:`~prisample.PrioritizedSampler` over the flattened slots ``pos · n_envs + env``.  A written
  slot enters at the maximum priority of the memory (line 6); a batch is drawn with
  ``P(i) = p_i^α / Σ_k p_k^α`` (Eq. 1) with ``p_i = |δ_i| + ε``, and carries its importance
  weights ``w_i = (N · P(i))^-β / max_j w_j`` (Sec. 3.4) and its slots.
* :class:`PrioritizedDQN` is SB3's ``DQN`` whose ``train`` weights each sample's Huber loss by
  ``w_i`` and writes ``|δ_i|`` back as the new priorities after each gradient step (lines 11-12);
  β goes linearly from its initial value to ``beta_final`` over ``learn(total_timesteps)``.
  Exploration, target updates, gradient clipping and logging stay SB3's.  ``train`` logs
  ``per/weight_mean`` and feeds a :class:`~prisample.diagnostics.WeightMonitor`, which warns once
  if the mean weight collapses.

Defaults: ``eps = 0.01`` and ``weight_norm = "batch"``, i.e. ``p_i = |δ_i| + 0.01`` and
``w_i = (N · P(i))^-β / max_{j in batch} (N · P(j))^-β``.  The former defaults were ``eps = 1e-6``
with the memory's maximum, and the weights collapsed: one slot with ``|δ| ≈ 0`` has a tiny
``P(i)`` and so the largest weight of the memory, which divides every other weight.  Measured in
``recipes/sb3_cartpole.py`` (RL Zoo hyper-parameters): the mean weight fell from 0.043 to 0.0013
within 12k steps while the largest priority grew from 4 to 57.  ``ε = 0.01`` is what the Double DQN
recipe's weight ablation chose (``recipes/configs/atari_ddqn/arms/proportional.yaml``,
``docs/results/weight_ablation.md``); dividing by the batch's largest weight is what the paper
authors' release does (DQN Zoo, ``dqn_zoo/replay.py``, ``importance_sampling_weights(...,
normalize=True)``) and what Dopamine's prioritized agents do (``loss_weights /=
jnp.max(loss_weights)``).  Pass ``eps=1e-6, weight_norm="memory"`` for the former behaviour.

>>> from prisample.sb3 import PrioritizedDQN
>>> model = PrioritizedDQN("MlpPolicy", "CartPole-v1", learning_starts=50, buffer_size=1000,
...                        replay_buffer_kwargs={"alpha": 0.6, "beta": 0.4}, seed=0)
>>> _ = model.learn(200)
>>> bool(model.replay_buffer.sampler.priorities[:200].min() < 1.0)   # |δ| written back
True

Needs the ``sb3`` extra (``pip install prisample[sb3]``).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import (
    DictReplayBufferSamples,
    GymEnv,
    ReplayBufferSamples,
    TensorDict,
)
from stable_baselines3.common.vec_env import VecNormalize
from stable_baselines3.dqn.policies import DQNPolicy

from prisample._validation import (
    as_indices,
    as_priorities,
    check_positive_int,
    to_numpy,
)
from prisample.diagnostics import WeightMonitor
from prisample.sampler import PrioritizedSampler
from prisample.weights import LinearSchedule, WeightNorm, check_beta

__all__ = [
    "PrioritizedDQN",
    "PrioritizedDictReplayBuffer",
    "PrioritizedDictReplayBufferSamples",
    "PrioritizedNStepReplayBuffer",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "weighted_huber",
]

SB3_BACKENDS = ("proportional", "rank")
DEFAULT_EPS = 0.01
"""``ε`` of ``p_i = |δ_i| + ε``: the Double DQN recipe's weight ablation
(``recipes/configs/atari_ddqn/arms/proportional.yaml``); 1e-6 let the weights collapse."""
DEFAULT_WEIGHT_NORM: WeightNorm = "batch"
"""Weights divided by the batch's largest, as DQN Zoo (``dqn_zoo/replay.py``,
``importance_sampling_weights(normalize=True)``) and Dopamine's prioritized agents do."""


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields (read by name in SB3's training code), then the draw's
    importance weights and slots."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    """``None`` for one-step returns (``γ`` comes from the algorithm); from
    :class:`PrioritizedNStepReplayBuffer`, ``γ^m`` of each sample's window of ``m`` rewards, shape
    ``(batch_size, 1)``."""
    weights: th.Tensor
    """``w_i``, float32, shape ``(batch_size, 1)`` like ``rewards``, on the buffer's device."""
    indices: npt.NDArray[np.int64]
    """Slots ``pos · n_envs + env``: pass them back to :meth:`PrioritizedReplayBuffer.update_priorities`."""


class PrioritizedDictReplayBufferSamples(NamedTuple):
    """:class:`PrioritizedReplayBufferSamples` with the observations of SB3's
    ``DictReplayBufferSamples``: one tensor per key of the Dict observation space."""

    observations: TensorDict
    actions: th.Tensor
    next_observations: TensorDict
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    """Always ``None``: one-step returns."""
    weights: th.Tensor
    """``w_i``, float32, shape ``(batch_size, 1)``, on the buffer's device."""
    indices: npt.NDArray[np.int64]
    """Slots ``pos · n_envs + env``: pass them back to :meth:`PrioritizedReplayBuffer.update_priorities`."""


class PrioritizedReplayBuffer(ReplayBuffer):
    """SB3's ``ReplayBuffer`` drawn with prioritized replay (Schaul et al. 2016, Algorithm 1).

    The constructor is SB3's plus the sampler's arguments: ``alpha`` (``α``, 0 is uniform),
    ``beta`` (a float in ``[0, 1]`` or a :class:`~prisample.LinearSchedule` counted in draws),
    ``eps`` (``ε`` of ``p_i = |δ_i| + ε``, default 0.01), ``backend`` (``"proportional"`` or
    ``"rank"``), ``weight_norm`` (``"batch"``, the default, ``"memory"`` or ``"none"``) and ``seed``
    (the draws' RNG).

    The weights are ``w_i = (N · P(i))^-β / max_j (N · P(j))^-β`` with the maximum over the drawn
    batch (``"batch"``: DQN Zoo's ``importance_sampling_weights(normalize=True)``, Dopamine's
    ``loss_weights /= max(loss_weights)``) or over the memory (``"memory"``, Sec. 3.4 of the
    paper).  The defaults ``eps=0.01, weight_norm="batch"`` replace ``eps=1e-6,
    weight_norm="memory"``, under which the weights collapsed (module docstring).  A saved buffer
    (``save_replay_buffer``) or sampler state keeps the ``eps`` and ``weight_norm`` it was built
    with.

    Storage is SB3's own; :attr:`sampler` holds one priority per slot ``pos · n_envs + env``.  With
    ``optimize_memory_usage`` the slots of row ``pos`` are left out once the buffer is full, as SB3
    leaves them out (their observation has been overwritten by the newest next observation).
    :meth:`sample` returns :class:`PrioritizedReplayBufferSamples`; feed the TD errors back with
    :meth:`update_priorities`.

    Dict observation spaces take :class:`PrioritizedDictReplayBuffer` and n-step returns
    :class:`PrioritizedNStepReplayBuffer`.  Both are subclasses: the priorities, the draw and the
    weights are this class's, and a subclass only says how a slot's transition is read
    (:meth:`samples_at`).
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = DEFAULT_EPS,
        backend: str = "proportional",
        weight_norm: WeightNorm = DEFAULT_WEIGHT_NORM,
        seed: int | None = None,
    ) -> None:
        if backend not in SB3_BACKENDS:
            raise ValueError(f"backend should be one of {SB3_BACKENDS}, but got backend={backend!r}")
        self._check_storage(observation_space, optimize_memory_usage)
        buffer_size = check_positive_int(buffer_size, "buffer_size")
        n_envs = check_positive_int(n_envs, "n_envs")
        rows = max(buffer_size // n_envs, 1)  # SB3's own adjustment of buffer_size
        # Built first: it validates its arguments before SB3 allocates the arrays.
        self.sampler = PrioritizedSampler(
            rows * n_envs,
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            size=0,
            seed=seed,
        )
        self.beta_schedule: float | LinearSchedule = (
            beta if isinstance(beta, LinearSchedule) else check_beta(beta)
        )
        """``beta`` as given; :class:`PrioritizedDQN` anneals a float one over ``learn``."""
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device,
            n_envs,
            optimize_memory_usage,
            handle_timeout_termination,
        )
        assert self.buffer_size == rows

    @classmethod
    def _check_storage(cls, observation_space: spaces.Space[Any], optimize_memory_usage: bool) -> None:
        """Refuse, before anything is allocated, what this class's SB3 storage cannot hold."""
        if isinstance(observation_space, spaces.Dict):
            raise ValueError(
                f"observation_space should not be a Dict space for {cls.__name__} (Dict observations "
                f"take PrioritizedDictReplayBuffer), but got observation_space={observation_space!r}"
            )

    @property
    def beta(self) -> float:
        """``β`` of the next draw."""
        return self.sampler.beta

    @beta.setter
    def beta(self, value: float | LinearSchedule) -> None:
        self.sampler.beta = value

    def _row_slots(self, row: int) -> npt.NDArray[np.int64]:
        return row * self.n_envs + np.arange(self.n_envs, dtype=np.int64)

    def add(
        self,
        obs: np.ndarray | dict[str, np.ndarray],
        next_obs: np.ndarray | dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """SB3's ``add`` (one vector step, one row of ``n_envs`` slots), then the row's slots
        enter the sampler at the maximum priority."""
        row = self.pos
        super().add(obs, next_obs, action, reward, done, infos)  # type: ignore[arg-type]  # dicts: DictReplayBuffer's
        self.sampler.add(self._row_slots(row))
        if self.optimize_memory_usage and self.full:
            # SB3 never samples row `pos` then: its observation is now the next observation just
            # written (buffers.py, ReplayBuffer.sample).
            self.sampler.remove(self._row_slots(self.pos))

    def reset(self) -> None:
        super().reset()
        self.sampler.remove(np.flatnonzero(~np.isnan(self.sampler.priorities)))

    def _draw(
        self, batch_size: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], th.Tensor, npt.NDArray[np.int64]]:
        """``(rows, envs, weights, slots)`` of ``batch_size`` slots drawn (stratified) with
        ``P(i) = p_i^α / Σ_k p_k^α``: the one draw every buffer class here makes."""
        draw = self.sampler.sample(check_positive_int(batch_size, "batch_size"))
        rows, envs = np.divmod(draw.indices, self.n_envs)
        return rows, envs, self.to_torch(draw.weights.reshape(-1, 1)), draw.indices

    def sample(  # type: ignore[override]  # SB3's fields plus weights and indices
        self, batch_size: int, env: VecNormalize | None = None
    ) -> PrioritizedReplayBufferSamples:
        """Draw ``batch_size`` slots (stratified, ``P(i) = p_i^α / Σ_k p_k^α``) with their weights.

        Advances a :class:`~prisample.LinearSchedule` β by one draw.  ``batch_size`` must be an
        integer ``>= 1`` (``TypeError``/``ValueError`` naming it).
        """
        rows, envs, weights, slots = self._draw(batch_size)
        return PrioritizedReplayBufferSamples(*self.samples_at(rows, envs, env), weights, slots)

    def _observations_at(
        self,
        store: Any,
        rows: npt.NDArray[np.int64],
        envs: npt.NDArray[np.int64],
        env: VecNormalize | None,
    ) -> Any:
        """The slots' observations from ``store`` (``observations`` or ``next_observations``),
        normalised as SB3 normalises them, as a tensor on the buffer's device."""
        return self.to_torch(np.asarray(self._normalize_obs(store[rows, envs], env)))

    def _one_step(
        self, rows: npt.NDArray[np.int64], envs: npt.NDArray[np.int64], env: VecNormalize | None
    ) -> tuple[Any, th.Tensor, Any, th.Tensor, th.Tensor]:
        """``(observations, actions, next_observations, dones, rewards)`` of one-step transitions,
        as SB3's ``ReplayBuffer._get_samples`` and ``DictReplayBuffer._get_samples`` build them."""
        if self.optimize_memory_usage:  # the next observation is the next row's observation
            next_obs = self._observations_at(self.observations, (rows + 1) % self.buffer_size, envs, env)
        else:
            next_obs = self._observations_at(self.next_observations, rows, envs, env)
        # Timeouts are not terminations (DLR-RM/stable-baselines3#284); 0 without handle_timeout_termination.
        dones = self.dones[rows, envs] * (1 - self.timeouts[rows, envs])
        rewards = self._normalize_reward(self.rewards[rows, envs].reshape(-1, 1), env)
        return (
            self._observations_at(self.observations, rows, envs, env),
            self.to_torch(np.asarray(self.actions[rows, envs])),
            next_obs,
            self.to_torch(np.asarray(dones.reshape(-1, 1))),
            self.to_torch(np.asarray(rewards)),
        )

    def samples_at(
        self,
        batch_inds: npt.NDArray[np.int64],
        env_indices: npt.NDArray[np.int64],
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """SB3's batch of the slots ``(batch_inds[j], env_indices[j])``: what SB3's
        ``_get_samples`` (stable-baselines3 2.9, ``common/buffers.py``) builds, except that the
        environments are chosen here, not drawn inside.  :meth:`sample` reads its draw with it."""
        return ReplayBufferSamples(*self._one_step(batch_inds, env_indices, env))

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> ReplayBufferSamples:
        # SB3's own read path (its uniform ``sample``, its tests): the environments drawn as SB3
        # draws them, the transitions read by this class's samples_at, not by SB3's parent class.
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        return self.samples_at(batch_inds, env_indices, env)

    def gather(
        self,
        batch_inds: npt.NDArray[np.int64],
        env_indices: npt.NDArray[np.int64],
        env: VecNormalize | None = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """:meth:`samples_at` without ``discounts``: ``(observations, actions, next_observations,
        dones, rewards)``."""
        obs, actions, next_obs, dones, rewards, _ = self.samples_at(batch_inds, env_indices, env)
        return obs, actions, next_obs, dones, rewards

    def update_priorities(self, indices: npt.ArrayLike, td_errors: npt.ArrayLike | th.Tensor) -> None:
        """Priorities ``p_i = |δ_i|`` of drawn slots (``td_errors`` of shape ``(k,)`` or ``(k, 1)``,
        numpy or torch on any device); the last of duplicate slots wins.

        ``TypeError``/``ValueError`` naming ``indices`` or ``td_errors``, and nothing changes,
        unless ``indices`` are integers naming filled slots and ``td_errors`` holds one finite
        real value per index."""
        idx = as_indices(indices, "indices")
        errors = to_numpy(td_errors, "td_errors")
        if errors.dtype.kind not in "fiu":
            raise TypeError(f"td_errors should hold real numbers, but got dtype {errors.dtype}")
        if errors.ndim == 2 and errors.shape[1] == 1:
            errors = errors[:, 0]
        values = as_priorities(errors, idx.shape[0], "td_errors")
        finite = np.isfinite(values)
        if not finite.all():
            j = int(np.argmin(finite))
            raise ValueError(f"td_errors should be finite, but got td_errors[{j}]={float(values[j])!r}")
        self.sampler.update_priorities(idx, np.abs(values))


class PrioritizedDictReplayBuffer(PrioritizedReplayBuffer, DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` (Dict observation spaces) drawn with prioritized replay.

    The constructor, the priorities, the draw and the weights are :class:`PrioritizedReplayBuffer`'s;
    the storage is SB3's ``DictReplayBuffer``: per key of the observation space, arrays of shape
    ``(buffer_size, n_envs, ...)`` for observations and next observations, one priority per slot
    ``pos · n_envs + env``.  :meth:`sample` returns :class:`PrioritizedDictReplayBufferSamples`
    (one observation tensor per key, normalised per key by a ``VecNormalize`` as SB3 does).
    ``observation_space`` must be a ``spaces.Dict`` and ``optimize_memory_usage`` false, as SB3
    requires (``ValueError`` naming them, before anything is built).  One-step returns.
    """

    @classmethod
    def _check_storage(cls, observation_space: spaces.Space[Any], optimize_memory_usage: bool) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise ValueError(
                f"observation_space should be a Dict space for {cls.__name__} (other spaces take "
                f"PrioritizedReplayBuffer), but got observation_space={observation_space!r}"
            )
        if optimize_memory_usage:
            raise ValueError(
                "optimize_memory_usage should be False (SB3's DictReplayBuffer does not support it), "
                f"but got optimize_memory_usage={optimize_memory_usage!r}"
            )

    def sample(  # type: ignore[override]  # SB3's Dict fields plus weights and indices
        self, batch_size: int, env: VecNormalize | None = None
    ) -> PrioritizedDictReplayBufferSamples:
        """:meth:`PrioritizedReplayBuffer.sample` with one observation tensor per key."""
        rows, envs, weights, slots = self._draw(batch_size)
        return PrioritizedDictReplayBufferSamples(*self.samples_at(rows, envs, env), weights, slots)

    def _observations_at(
        self,
        store: Any,
        rows: npt.NDArray[np.int64],
        envs: npt.NDArray[np.int64],
        env: VecNormalize | None,
    ) -> TensorDict:
        normalized = self._normalize_obs({key: array[rows, envs] for key, array in store.items()}, env)
        assert isinstance(normalized, dict)
        return {key: self.to_torch(np.asarray(value)) for key, value in normalized.items()}

    def samples_at(  # type: ignore[override]  # SB3's DictReplayBufferSamples
        self,
        batch_inds: npt.NDArray[np.int64],
        env_indices: npt.NDArray[np.int64],
        env: VecNormalize | None = None,
    ) -> DictReplayBufferSamples:
        """SB3's ``DictReplayBuffer._get_samples`` batch of the slots ``(batch_inds[j],
        env_indices[j])``, the environments chosen here."""
        return DictReplayBufferSamples(*self._one_step(batch_inds, env_indices, env))

    def _get_samples(  # type: ignore[override]  # SB3's DictReplayBufferSamples
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> DictReplayBufferSamples:
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        return self.samples_at(batch_inds, env_indices, env)

    def gather(  # type: ignore[override]  # observations per key
        self,
        batch_inds: npt.NDArray[np.int64],
        env_indices: npt.NDArray[np.int64],
        env: VecNormalize | None = None,
    ) -> tuple[TensorDict, th.Tensor, TensorDict, th.Tensor, th.Tensor]:
        """:meth:`samples_at` without ``discounts``."""
        obs, actions, next_obs, dones, rewards, _ = self.samples_at(batch_inds, env_indices, env)
        return obs, actions, next_obs, dones, rewards


class PrioritizedNStepReplayBuffer(PrioritizedReplayBuffer, NStepReplayBuffer):
    """SB3's ``NStepReplayBuffer`` (n-step returns) drawn with prioritized replay.

    The constructor is :class:`PrioritizedReplayBuffer`'s plus SB3's ``n_steps`` (an integer
    ``>= 1``, default 3) and ``gamma`` (in ``[0, 1]``, default 0.99); ``optimize_memory_usage``
    must be false and the observation space not a Dict, as in SB3 (``ValueError`` naming them).
    The storage is SB3's one-step rows; each slot ``pos · n_envs + env`` has one priority, that of
    the n-step transition starting there (the ``|δ|`` of its n-step target).

    The batch is SB3's n-step batch (stable-baselines3 2.9, ``NStepReplayBuffer._get_samples``).
    The window of slot ``(t, e)`` runs over the rows ``t, t+1, …`` (modulo ``buffer_size``) of
    environment ``e`` and ends at the first of its first ``n`` rows that is a done, a timeout, or
    the newest row ``pos − 1`` (the row after that one is older data, or empty); ``m`` is its length
    (``n`` if none ends it).  Then, with ``u = t + m − 1``::

        rewards   = Σ_{k<m} γ^k r_{t+k}          discounts = γ^m
        next_observations = s'_u                dones = done_u · (1 − timeout_u)

    ``DQN.train`` (and :class:`PrioritizedDQN`) bootstrap with ``rewards + (1 − dones) ·
    discounts · max_a Q_target(s'_u, a)``.  SB3 marks the newest row as a timeout in its arrays
    while it reads a batch; here nothing is written.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        n_steps: int = 3,
        gamma: float = 0.99,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = DEFAULT_EPS,
        backend: str = "proportional",
        weight_norm: WeightNorm = DEFAULT_WEIGHT_NORM,
        seed: int | None = None,
    ) -> None:
        n_steps = check_positive_int(n_steps, "n_steps")
        gamma = check_beta(gamma, "gamma")
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device,
            n_envs,
            optimize_memory_usage,
            handle_timeout_termination,
            alpha=alpha,
            beta=beta,
            eps=eps,
            backend=backend,
            weight_norm=weight_norm,
            seed=seed,
        )
        # NStepReplayBuffer's constructor, reached above, stored its own defaults.
        self.n_steps = n_steps
        self.gamma = gamma

    @classmethod
    def _check_storage(cls, observation_space: spaces.Space[Any], optimize_memory_usage: bool) -> None:
        super()._check_storage(observation_space, optimize_memory_usage)
        if optimize_memory_usage:
            raise ValueError(
                "optimize_memory_usage should be False (SB3's NStepReplayBuffer does not support it), "
                f"but got optimize_memory_usage={optimize_memory_usage!r}"
            )

    def samples_at(
        self,
        batch_inds: npt.NDArray[np.int64],
        env_indices: npt.NDArray[np.int64],
        env: VecNormalize | None = None,
    ) -> ReplayBufferSamples:
        """The n-step batch (class docstring) of the slots ``(batch_inds[j], env_indices[j])``."""
        rows, envs = np.asarray(batch_inds), np.asarray(env_indices)
        k = np.arange(self.n_steps)
        window = (rows[:, None] + k) % self.buffer_size  # (batch, n): each window's rows in time order
        column = envs[:, None]
        ends = (self.dones[window, column] != 0) | (self.timeouts[window, column] != 0)
        ends |= window == (self.pos - 1) % self.buffer_size
        ends[:, -1] = True  # a window no step ends keeps all n rewards
        length = ends.argmax(axis=1) + 1  # m
        kept = k < length[:, None]
        rewards = self._normalize_reward(self.rewards[window, column], env)
        gammas = self.gamma ** k.astype(np.float32)
        returns = (rewards * gammas * kept).sum(axis=1, keepdims=True)
        discounts = self.gamma ** length[:, None].astype(np.float32)
        last = window[np.arange(window.shape[0]), length - 1]
        dones = self.dones[last, envs] * (1 - self.timeouts[last, envs])
        return ReplayBufferSamples(
            self._observations_at(self.observations, rows, envs, env),
            self.to_torch(np.asarray(self.actions[rows, envs])),
            self._observations_at(self.next_observations, last, envs, env),
            self.to_torch(dones.reshape(-1, 1).astype(np.float32)),
            self.to_torch(np.asarray(returns)),
            self.to_torch(np.asarray(discounts)),
        )


def weighted_huber(
    current_q: th.Tensor, target_q: th.Tensor, weights: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """``(mean_i w_i · Huber(δ_i), |δ_i|)`` with ``δ_i = target_i − Q(s_i, a_i)``.

    SB3's DQN loss is ``F.smooth_l1_loss(current_q, target_q)`` (a mean over the batch); with
    all ``w_i = 1`` this is the same number.  ``|δ|`` is detached: the new priorities.
    """
    per_sample = th.nn.functional.smooth_l1_loss(current_q, target_q, reduction="none")
    loss = (weights * per_sample).mean()
    return loss, (target_q - current_q).detach().abs()


class PrioritizedDQN(DQN):
    """SB3's ``DQN`` with prioritized replay (Schaul et al. 2016, Algorithm 1).

    Every argument is ``DQN``'s.  The buffer class is picked as SB3's off-policy algorithms pick
    theirs: :class:`PrioritizedDictReplayBuffer` for a Dict observation space,
    :class:`PrioritizedNStepReplayBuffer` for ``n_steps > 1`` (given the model's ``n_steps`` and
    ``gamma``), else :class:`PrioritizedReplayBuffer`.  A ``replay_buffer_class`` given explicitly
    must be a subclass of :class:`PrioritizedReplayBuffer`, and an n-step one when ``n_steps > 1``
    (SB3 would silently train one-step returns); an n-step class given explicitly takes the model's
    ``gamma``, and its ``n_steps`` when that is above 1, unless ``replay_buffer_kwargs`` names them.
    As in SB3, a Dict observation space needs ``n_steps = 1``.  The buffer is configured through
    ``replay_buffer_kwargs`` (``alpha``, ``beta``, ``eps``, ``backend``, ``weight_norm``, ``seed``)
    and reached as ``model.replay_buffer``, its priorities as ``model.replay_buffer.sampler``.

    ``beta_final``: a float ``beta`` of the buffer is annealed linearly to it over each
    ``learn(total_timesteps)`` call, through SB3's ``_current_progress_remaining`` (``None``: kept
    constant).  A :class:`~prisample.LinearSchedule` ``beta`` follows its own schedule, counted in
    gradient steps, and ``beta_final`` is not used.

    ``train`` logs ``per/beta`` (β of the last draw), ``per/weight_mean`` (the mean weight of the
    call's batches) and ``per/max_priority`` next to SB3's ``train/loss``, and feeds every batch's
    weights to :attr:`weight_monitor`, a :class:`~prisample.diagnostics.WeightMonitor` that warns
    once (``RuntimeWarning``) if the mean weight over the last 100 batches falls below 0.01.  The
    monitor is not saved with the model (``save``); a loaded model starts a fresh one.
    """

    replay_buffer: PrioritizedReplayBuffer  # set up by SB3 (its `replay_buffer_class`)

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: GymEnv | str,
        *args: Any,
        beta_final: float | None = 1.0,
        **kwargs: Any,
    ) -> None:
        self.beta_final = None if beta_final is None else check_beta(beta_final, "beta_final")
        buffer_class = kwargs.get("replay_buffer_class")
        if buffer_class is not None and not (
            isinstance(buffer_class, type) and issubclass(buffer_class, PrioritizedReplayBuffer)
        ):
            raise ValueError(
                "replay_buffer_class should be PrioritizedReplayBuffer or a subclass, "
                f"but got replay_buffer_class={buffer_class!r}"
            )
        if "n_steps" in kwargs:
            check_positive_int(kwargs["n_steps"], "n_steps")
        self.weight_monitor = WeightMonitor()
        """The mean importance weight over the last batches; warns once if it collapses."""
        super().__init__(policy, env, *args, **kwargs)

    def _setup_model(self) -> None:
        """SB3's ``_setup_model`` with the prioritized buffer class picked as SB3 picks its own
        (``OffPolicyAlgorithm._setup_model``); a loaded model keeps the class it was saved with."""
        self.n_steps = check_positive_int(self.n_steps, "n_steps")
        if isinstance(self.observation_space, spaces.Dict) and self.n_steps > 1:
            raise ValueError(
                "n_steps should be 1 with a Dict observation space (SB3 has no n-step returns over "
                f"Dict observations), but got n_steps={self.n_steps!r}"
            )
        buffer_class = self.replay_buffer_class
        if buffer_class is None:
            if isinstance(self.observation_space, spaces.Dict):
                buffer_class = PrioritizedDictReplayBuffer
            elif self.n_steps > 1:
                buffer_class = PrioritizedNStepReplayBuffer
                self.replay_buffer_kwargs.update({"n_steps": self.n_steps, "gamma": self.gamma})
            else:
                buffer_class = PrioritizedReplayBuffer
            self.replay_buffer_class = buffer_class
        elif issubclass(buffer_class, PrioritizedNStepReplayBuffer):
            self.replay_buffer_kwargs.setdefault("gamma", self.gamma)
            if self.n_steps > 1:
                self.replay_buffer_kwargs.setdefault("n_steps", self.n_steps)
        elif self.n_steps > 1:
            raise ValueError(
                f"n_steps should be 1 with replay_buffer_class={buffer_class.__name__} (one-step "
                "returns; n-step returns take PrioritizedNStepReplayBuffer or a subclass), "
                f"but got n_steps={self.n_steps!r}"
            )
        with warnings.catch_warnings():
            # SB3 >= 2.9.1 warns that n_steps is ignored whenever a buffer class is set; the n-step
            # class set above has been given the model's n_steps.
            warnings.filterwarnings("ignore", message=r"`n_steps=\d+` is ignored", category=UserWarning)
            super()._setup_model()

    @property
    def weight_mean(self) -> float:
        """Mean importance weight over the last batches (:attr:`weight_monitor`; NaN before training)."""
        return self.weight_monitor.weight_mean

    def _excluded_save_params(self) -> list[str]:
        # Run-time bookkeeping: models saved before the monitor existed load the same way.
        return [*super()._excluded_save_params(), "weight_monitor"]

    def _anneal_beta(self) -> None:
        start = self.replay_buffer.beta_schedule
        if self.beta_final is None or isinstance(start, LinearSchedule):
            return
        progress = min(max(1.0 - self._current_progress_remaining, 0.0), 1.0)
        self.replay_buffer.beta = start + (self.beta_final - start) * progress

    def _target_q_values(self, replay_data: PrioritizedReplayBufferSamples) -> th.Tensor:
        """``r + (1 − done) · γ' · max_a Q_target(s', a)``, as SB3's ``DQN.train``: ``γ'`` is the
        batch's ``discounts`` (n-step returns: ``γ^m`` per sample), else the model's ``γ``."""
        gamma = replay_data.discounts if replay_data.discounts is not None else self.gamma
        with th.no_grad():
            next_q, _ = self.q_net_target(replay_data.next_observations).max(dim=1)
            target: th.Tensor = replay_data.rewards + (1 - replay_data.dones) * gamma * next_q.reshape(-1, 1)
        return target

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's ``DQN.train`` (stable-baselines3 2.9, ``dqn/dqn.py``) with the loss weighted by
        ``w_i`` and ``|δ_i|`` written back after each gradient step."""
        buffer = self.replay_buffer
        self._anneal_beta()
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses, weight_means = [], []
        beta = buffer.beta
        for _ in range(gradient_steps):
            beta = buffer.beta  # the β this draw uses
            replay_data = buffer.sample(batch_size, env=self._vec_normalize_env)
            target_q = self._target_q_values(replay_data)
            q_values = self.q_net(replay_data.observations)
            current_q = th.gather(q_values, dim=1, index=replay_data.actions.long())
            # PER: importance-weighted Huber loss (Algorithm 1, line 10)
            loss, td_abs = weighted_huber(current_q, target_q, replay_data.weights)
            losses.append(loss.item())
            weight_means.append(self.weight_monitor.update(replay_data.weights))
            self.policy.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            buffer.update_priorities(replay_data.indices, td_abs)  # PER: p_i = |δ_i| (line 12)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("per/beta", beta)
        self.logger.record("per/weight_mean", np.mean(weight_means))
        self.logger.record("per/max_priority", buffer.sampler.max_priority)
