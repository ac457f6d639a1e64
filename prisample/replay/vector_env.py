"""One gymnasium vector-environment step turned into the transitions a replay memory should store.

A vector environment resets a sub-environment by itself when its episode ends ("autoreset"), and
*how* it does so decides which of the arrays it returns belong to which episode.  Gymnasium has
three modes (``gymnasium.vector.AutoresetMode``, https://farama.org/Vector-Autoreset-Mode):

``NextStep`` (gymnasium's default)
    At the step where env ``i`` terminates or truncates, ``next_obs[i]`` is the episode's final
    observation.  The *next* call of ``step`` does not step env ``i``: it resets it, ignores its
    action and returns ``reward 0``, ``terminated = truncated = False`` and the first observation
    of the new episode.  That reset step is no transition — its ``obs → next_obs`` would join the
    last observation of one episode to the first of the next — so it is skipped.
``SameStep``
    At the step where env ``i`` ends, the env is reset at once: ``next_obs[i]`` is already the first
    observation of the new episode, and the final observation is in ``infos["final_obs"][i]``
    (mask ``infos["_final_obs"]``).  The transition stores the final observation as ``next_obs``.
``Disabled``
    The user resets ended envs themselves (``envs.reset(options={"reset_mask": done})``) before
    the next step: every step is a transition and nothing is skipped.  Call
    :meth:`VectorStepConverter.reset` after any ``envs.reset``.

Each stored transition carries the per-step discount ``γ_t = γ · (1 − terminated_t)``: 0 when the
episode terminated (no bootstrap), ``γ`` when it was truncated (a time limit is not a terminal state:
the target bootstraps from the final observation, Pardo et al. 2018), and ``episode_end =
terminated | truncated`` so the memory starts a new episode on that stream.  These are the
``discount`` and ``episode_end`` of :meth:`prisample.ReplayMemory.add_many` (Schaul et al. 2016,
Algorithm 1, line 6, with ``γ_t`` as in its line 11).

>>> import numpy as np
>>> conv = VectorStepConverter(2, autoreset_mode="NextStep")
>>> obs = np.array([[0.0], [10.0]])
>>> rows = conv.step(obs, [1, 0], [1.0, 1.0], np.array([True, False]), np.array([False, False]),
...                  obs + 1, {}, gamma=0.9)
>>> rows.streams.tolist(), rows.discount.tolist(), rows.episode_end.tolist()
([0, 1], [0.0, 0.9], [True, False])
>>> rows = conv.step(np.array([[1.0], [11.0]]), [0, 0], [0.0, 1.0], np.array([False, False]),
...                  np.array([False, True]), np.array([[100.0], [12.0]]), {}, gamma=0.9)
>>> rows.streams.tolist(), rows.discount.tolist()   # env 0 only reset: no transition
([1], [0.9])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, Protocol, cast

import numpy as np
import numpy.typing as npt

from prisample._validation import check_positive_int, to_numpy

__all__ = [
    "MODES",
    "STATE_VERSION",
    "ModeName",
    "ObsTree",
    "VectorEnvLike",
    "VectorStepConverter",
    "VectorTransitions",
    "converter_for",
    "rows_of_extras",
]


STATE_VERSION = 1

ModeName = Literal["NextStep", "SameStep", "Disabled"]
MODES: tuple[ModeName, ...] = ("NextStep", "SameStep", "Disabled")

# An observation batch: an array with a leading env axis, or a dict/tuple of them (gymnasium's
# Dict and Tuple spaces), nested as the space is.
ObsTree = Any


class VectorEnvLike(Protocol):
    """What :meth:`VectorStepConverter.for_env` reads from a ``gymnasium.vector.VectorEnv``."""

    num_envs: int
    metadata: dict[str, Any]


class VectorTransitions(NamedTuple):
    """The transitions of one vector step to store, one row per kept env (in env order).

    Fields line up with :meth:`prisample.ReplayMemory.add_many`'s arguments: pass
    ``streams=rows.streams`` and ``episode_end=rows.episode_end``.  ``obs``/``next_obs`` (and
    ``action``) are arrays, or dicts/tuples of arrays when the space is a ``Dict``/``Tuple``.
    """

    streams: npt.NDArray[np.int64]
    """Env ids of the rows (int64): the replay's stream of each transition."""
    obs: ObsTree
    """``s_t`` of each row."""
    action: ObsTree
    """``a_t`` of each row."""
    reward: npt.NDArray[np.float64]
    """``r_{t+1}`` of each row (float64)."""
    discount: npt.NDArray[np.float64]
    """``γ_t = γ · (1 − terminated)`` of each row (float64): 0 at termination, γ otherwise."""
    next_obs: ObsTree
    """``s_{t+1}``: the final observation where the episode ended (in every mode)."""
    episode_end: npt.NDArray[np.bool_]
    """``terminated | truncated`` of each row: the episode ended at ``next_obs``."""


def _mode_name(mode: Any, name: str) -> ModeName | None:
    """``mode`` (an ``AutoresetMode``, its string value or ``None``) as its string value."""
    if mode is None:
        return None
    value = getattr(mode, "value", mode)  # gymnasium.vector.AutoresetMode is an Enum of strings
    if not isinstance(value, str):
        raise TypeError(
            f"{name} should be a gymnasium AutoresetMode, one of {MODES} or None, but got {name}={mode!r}"
        )
    if value not in MODES:
        raise ValueError(f"{name} should be one of {MODES} (or None to detect it), but got {name}={mode!r}")
    return value


_DESCRIPTION = {"NextStep": "next-step", "SameStep": "same-step", "Disabled": "disabled", None: "undetected"}


def _describe(mode: ModeName | None) -> str:
    return _DESCRIPTION[mode]


def _leaves(tree: ObsTree, name: str, n: int) -> ObsTree:
    """``tree`` with every leaf as a numpy array whose leading axis has length ``n``."""
    if isinstance(tree, Mapping):
        return {key: _leaves(value, f"{name}[{key!r}]", n) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_leaves(value, f"{name}[{i}]", n) for i, value in enumerate(tree))
    array = to_numpy(tree, name)
    if array.dtype == object:
        raise TypeError(
            f"{name} should be an array of numbers (or a dict/tuple of them), but got dtype object"
        )
    if array.ndim == 0 or array.shape[0] != n:
        raise ValueError(
            f"{name} should have a leading axis of length num_envs={n}, but got shape {array.shape}"
        )
    return array


def _check_alike(a: ObsTree, b: ObsTree, name: str, other: str) -> None:
    """``b`` has ``a``'s structure and per-env leaf shapes."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            raise ValueError(f"{other} should have the structure of {name}, but got keys that differ")
        for key in a:
            _check_alike(a[key], b[key], f"{name}[{key!r}]", f"{other}[{key!r}]")
    elif isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            raise ValueError(f"{other} should have the structure of {name}, but got a different tuple")
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _check_alike(x, y, f"{name}[{i}]", f"{other}[{i}]")
    elif a.shape[1:] != b.shape[1:]:
        raise ValueError(
            f"{other} should have shape (num_envs, *{a.shape[1:]}) like {name}, but got shape {b.shape}"
        )


def _take(tree: ObsTree, rows: npt.NDArray[np.int64]) -> ObsTree:
    """Rows ``rows`` of every leaf (copies)."""
    if isinstance(tree, dict):
        return {key: _take(value, rows) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_take(value, rows) for value in tree)
    return tree[rows]


def _put_row(tree: ObsTree, row: int, single: Any, name: str) -> None:
    """Write one env's observation ``single`` (same structure, no env axis) into row ``row``."""
    if isinstance(tree, dict):
        if not isinstance(single, Mapping) or single.keys() != tree.keys():
            raise ValueError(f"{name} should be a dict with keys {sorted(tree)}, but got {single!r:.80}")
        for key, value in tree.items():
            _put_row(value, row, single[key], f"{name}[{key!r}]")
    elif isinstance(tree, tuple):
        if not isinstance(single, tuple) or len(single) != len(tree):
            raise ValueError(f"{name} should be a tuple of {len(tree)} observations, but got {single!r:.80}")
        for i, value in enumerate(tree):
            _put_row(value, row, single[i], f"{name}[{i}]")
    else:
        array = to_numpy(single, name)
        if array.shape != tree.shape[1:] or array.dtype == object:
            raise ValueError(
                f"{name} should be an observation of shape {tree.shape[1:]}, but got {single!r:.80}"
            )
        tree[row] = array


def _flags(value: npt.ArrayLike, name: str, n: int) -> npt.NDArray[np.bool_]:
    array = to_numpy(value, name)
    if array.dtype != np.bool_:
        raise TypeError(f"{name} should be a bool array, but got dtype {array.dtype} ({name}={value!r:.80})")
    if array.shape != (n,):
        raise ValueError(f"{name} should have shape (num_envs,) = ({n},), but got shape {array.shape}")
    return array


class VectorStepConverter:
    """Turns each step of a gymnasium vector env into the transitions to store (see the module).

    ``VectorStepConverter(num_envs, autoreset_mode=None)`` keeps one flag per env: whether its
    previous step ended an episode.  In next-step mode the following step of that env is its reset
    step and yields no transition.  ``autoreset_mode`` is a ``gymnasium.vector.AutoresetMode``, its
    string value (``"NextStep"``, ``"SameStep"``, ``"Disabled"``) or ``None`` to detect it at the
    first step where an episode ends: ``"final_obs"`` in ``infos`` means same-step, its absence
    next-step.  Once known the mode is fixed, and a step that contradicts it raises ``ValueError``.
    Disabled mode cannot be told from next-step by the arrays alone: name it, or build the
    converter with :meth:`for_env`, which reads ``envs.metadata["autoreset_mode"]``.

    Every call is checked in full before anything changes: a rejected call leaves the flags and
    the mode as they were.  Per vector step, number of transitions = number of envs that really
    stepped, and none spans a reset.

    >>> conv = VectorStepConverter(4, autoreset_mode="SameStep")
    >>> conv.autoreset_mode
    'SameStep'
    """

    def __init__(self, num_envs: int, *, autoreset_mode: Any = None) -> None:
        self.num_envs = check_positive_int(num_envs, "num_envs")
        self._configured = _mode_name(autoreset_mode, "autoreset_mode")
        self._mode = self._configured
        # Per env: its last step ended an episode (next-step mode: this step is the reset step).
        self._ended = np.zeros(self.num_envs, dtype=np.bool_)

    @classmethod
    def for_env(cls, envs: VectorEnvLike) -> VectorStepConverter:
        """A converter for ``envs`` (a ``gymnasium.vector.VectorEnv``): its ``num_envs`` and the
        ``autoreset_mode`` in its ``metadata`` (detected when absent)."""
        num_envs = getattr(envs, "num_envs", None)
        metadata = getattr(envs, "metadata", None)
        mode = metadata.get("autoreset_mode") if isinstance(metadata, Mapping) else None
        return cls(cast(int, num_envs), autoreset_mode=mode)

    @property
    def autoreset_mode(self) -> ModeName | None:
        """The mode in use: configured, detected, or ``None`` while not yet detected."""
        return self._mode

    @property
    def reset_pending(self) -> npt.NDArray[np.bool_]:
        """Per env, whether its next step is a reset step (next-step mode) that will be skipped."""
        return self._ended.copy() if self._mode == "NextStep" else np.zeros(self.num_envs, dtype=np.bool_)

    def reset(self, mask: npt.ArrayLike | None = None) -> None:
        """Forget that envs ended: call it after ``envs.reset()`` (all envs, ``mask=None``) or
        ``envs.reset(options={"reset_mask": mask})``, whose observations start new episodes."""
        ended = self._ended.copy()
        if mask is None:
            ended[:] = False
        else:
            ended[_flags(mask, "mask", self.num_envs)] = False
        self._ended = ended

    def step(
        self,
        obs: ObsTree,
        action: ObsTree,
        reward: npt.ArrayLike,
        terminated: npt.ArrayLike,
        truncated: npt.ArrayLike,
        next_obs: ObsTree,
        infos: Mapping[str, Any],
        *,
        gamma: float,
    ) -> VectorTransitions:
        """The transitions of ``envs.step(action)`` taken from ``obs``.

        ``obs`` is what the previous ``step`` (or ``reset``) returned; ``action`` what was passed
        to ``step``; ``reward, terminated, truncated, next_obs, infos`` what it returned.  Leading
        axis ``num_envs`` everywhere.  Rows kept: every env, except in next-step mode the envs whose
        previous step ended an episode (their reset step).  ``next_obs`` of a row is the episode's
        final observation where it ended (``infos["final_obs"]`` in same-step mode); ``discount =
        gamma · (1 − terminated)``; ``episode_end = terminated | truncated``.

        Arrays may be numpy arrays, lists or torch tensors; a dict or tuple is a ``Dict`` or
        ``Tuple`` space, and its rows come back as a dict or tuple of arrays.
        """
        n = self.num_envs
        obs_t = _leaves(obs, "obs", n)
        next_t = _leaves(next_obs, "next_obs", n)
        _check_alike(obs_t, next_t, "obs", "next_obs")
        action_t = _leaves(action, "action", n)
        rewards = to_numpy(reward, "reward")
        if rewards.dtype.kind not in "fiu":
            raise TypeError(f"reward should hold real numbers, but got dtype {rewards.dtype}")
        if rewards.shape != (n,):
            raise ValueError(f"reward should have shape (num_envs,) = ({n},), but got shape {rewards.shape}")
        if not np.isfinite(rewards).all():
            j = int(np.argmin(np.isfinite(rewards)))
            raise ValueError(f"reward should be finite, but got reward[{j}]={rewards[j]!r}")
        term = _flags(terminated, "terminated", n)
        trunc = _flags(truncated, "truncated", n)
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
            raise TypeError(f"gamma should be a real number, but got gamma={gamma!r}")
        if not (math.isfinite(float(gamma)) and 0.0 <= float(gamma) <= 1.0):
            raise ValueError(f"gamma should lie in [0, 1], but got gamma={gamma!r}")
        if not isinstance(infos, Mapping):
            raise TypeError(f"infos should be the dict returned by step, but got infos={infos!r:.80}")
        done = term | trunc
        mode = self._mode_after(done, infos)

        if mode == "NextStep":
            reset_step = self._ended
            bad = reset_step & done
            if bad.any():
                j = int(np.argmax(bad))
                raise ValueError(
                    f"env {j} ended at the step after its episode ended, which in next-step autoreset is "
                    "its reset step (reported with terminated=truncated=False): the environment is not "
                    "in next-step mode; pass autoreset_mode='Disabled' if you reset envs yourself, or "
                    "call reset(mask) after envs.reset"
                )
            rows = np.flatnonzero(~reset_step).astype(np.int64)
        else:
            rows = np.arange(n, dtype=np.int64)
        next_rows = _take(next_t, rows)
        if mode == "SameStep":
            finals = infos.get("final_obs")
            for position, env in enumerate(rows):
                if done[env]:
                    _put_row(next_rows, position, self._final(finals, int(env)), f"infos['final_obs'][{env}]")

        result = VectorTransitions(
            streams=rows,
            obs=_take(obs_t, rows),
            action=_take(action_t, rows),
            reward=rewards[rows].astype(np.float64),
            discount=np.where(term[rows], 0.0, float(gamma)),
            next_obs=next_rows,
            episode_end=done[rows].copy(),
        )
        # Commit: nothing above changed the converter.
        self._mode = mode
        self._ended = done.copy()
        return result

    def _mode_after(self, done: npt.NDArray[np.bool_], infos: Mapping[str, Any]) -> ModeName | None:
        """The mode after this step (detected at the first step where an episode ends), checked
        against what ``infos`` says."""
        has_final = "final_obs" in infos
        if has_final:
            self._check_final_mask(done, infos)
        if not done.any():
            return self._mode
        seen: ModeName = "SameStep" if has_final else "NextStep"
        if self._mode is None or self._mode == seen or (self._mode == "Disabled" and not has_final):
            return seen if self._mode is None else self._mode
        j = int(np.argmax(done))
        how = "detected from an earlier step" if self._configured is None else "configured"
        found = "has" if has_final else "lacks"
        raise ValueError(
            f"env {j} ended and infos {found} 'final_obs', which means {_describe(seen)} autoreset, "
            f"but the converter's mode is {_describe(self._mode)} ({how}): the environment's "
            "autoreset mode does not match; build the converter with VectorStepConverter.for_env(envs) "
            "or pass its autoreset_mode"
        )

    def _check_final_mask(self, done: npt.NDArray[np.bool_], infos: Mapping[str, Any]) -> None:
        if "_final_obs" not in infos:
            return
        mask = _flags(infos["_final_obs"], "infos['_final_obs']", self.num_envs)
        if (mask != done).any():
            j = int(np.argmax(mask != done))
            raise ValueError(
                f"infos['_final_obs'] should mark exactly the envs that terminated or truncated, but got "
                f"infos['_final_obs'][{j}]={bool(mask[j])} where terminated|truncated is {bool(done[j])}"
            )

    def _final(self, finals: Any, env: int) -> Any:
        try:
            single = finals[env]
            length = len(finals)
        except (TypeError, IndexError, KeyError):
            raise ValueError(
                f"infos['final_obs'] should hold one final observation per env ({self.num_envs}), "
                f"but got {finals!r:.80}"
            ) from None
        if length != self.num_envs or single is None:
            raise ValueError(
                f"infos['final_obs'] should hold the final observation of env {env}, which ended, "
                f"but got {single!r:.80} (length {length})"
            )
        return single

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The per-env flags and the mode (configured or detected): plain values and one array."""
        return {
            "version": STATE_VERSION,
            "num_envs": self.num_envs,
            "autoreset_mode": self._mode,
            "ended": self._ended.copy(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; a malformed state, or one for another ``num_envs`` or
        configured mode, raises and changes nothing."""
        if not isinstance(state, Mapping):
            raise TypeError(f"state should be a dict from state_dict(), but got {state!r:.80}")
        keys = {"version", "num_envs", "autoreset_mode", "ended"}
        if set(state.keys()) != keys:
            raise ValueError(
                f"state should have keys {sorted(keys)}, but got {sorted(map(str, state.keys()))}"
            )
        version = state["version"]
        if type(version) is not int or version != STATE_VERSION:
            raise ValueError(f"state['version'] should be {STATE_VERSION}, but got {version!r}")
        num_envs = state["num_envs"]
        if type(num_envs) is not int or num_envs != self.num_envs:
            raise ValueError(
                f"state['num_envs'] should be this converter's {self.num_envs}, but got {num_envs!r}"
            )
        mode = state["autoreset_mode"]
        if mode is not None and (type(mode) is not str or mode not in MODES):
            raise ValueError(f"state['autoreset_mode'] should be one of {MODES} or None, but got {mode!r}")
        if self._configured is not None and mode != self._configured:
            raise ValueError(
                f"state['autoreset_mode'] should be the configured {self._configured!r}, but got {mode!r}"
            )
        ended = state["ended"]
        if not isinstance(ended, np.ndarray) or ended.dtype != np.bool_ or ended.shape != (self.num_envs,):
            raise ValueError(
                f"state['ended'] should be a bool array of shape ({self.num_envs},), but got {ended!r:.80}"
            )
        if ended.any() and mode is None:
            raise ValueError(
                "state['ended'] should be all False while the mode is undetected, but got True entries"
            )
        self._mode = mode
        self._ended = ended.copy()


def converter_for(
    converter: VectorStepConverter | None, reward: Any, autoreset_mode: Any, num_streams: int
) -> VectorStepConverter:
    """The converter a memory's vector step goes through: its own ``converter``, whose
    ``autoreset_mode`` a later call may repeat but not change, or at the first step a new one with
    one env per entry of ``reward`` (at most ``num_streams``: one stream per env)."""
    if converter is None:
        num_envs = to_numpy(reward, "reward").reshape(-1).shape[0]
        if num_envs > num_streams:
            raise ValueError(
                f"num_envs should be at most num_streams={num_streams} (one stream per env), "
                f"but got {num_envs} envs"
            )
        return VectorStepConverter(num_envs, autoreset_mode=autoreset_mode)
    if (
        autoreset_mode is not None
        and getattr(autoreset_mode, "value", autoreset_mode) != converter.autoreset_mode
    ):
        raise ValueError(
            f"autoreset_mode should be the converter's {converter.autoreset_mode!r} (set at the first "
            f"add_vector_step), but got autoreset_mode={autoreset_mode!r}"
        )
    return converter


def rows_of_extras(
    extras: Mapping[str, Any], rows: VectorTransitions, num_envs: int
) -> dict[str, npt.NDArray[Any]]:
    """Per-env extras (a leading ``num_envs`` axis each) at the envs of the converter's ``rows``."""
    picked = {}
    for name, value in extras.items():
        array = to_numpy(value, name)
        if array.ndim == 0 or array.shape[0] != num_envs:
            raise ValueError(
                f"{name} should have a leading axis of length num_envs={num_envs}, "
                f"but got shape {array.shape}"
            )
        picked[name] = array[rows.streams]
    return picked
