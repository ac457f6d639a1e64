"""Corrupted checkpoints for every ``load_state_dict``: one hypothesis strategy and one check.

A state is a nest of dicts, lists and tuples whose leaves are scalars, strings, ``None`` and numpy
arrays (or torch tensors).  :func:`corrupted_states` draws one corruption of a valid state: a key
dropped or added, a leaf replaced by a value of the wrong type or out of range, an array reshaped,
recast or with one element set to NaN, an infinity, a negative or a huge value, or the whole state
replaced by something that is not a state at all.  :func:`check_load` then demands one of two
outcomes: the load raises ``ValueError``/``TypeError`` and the object is exactly as it was, or
the load succeeds and the object is consistent (the caller's ``check_consistent``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

Path = tuple[Any, ...]

# Values a careless or hostile checkpoint could hold where a number, array or string belongs.
BAD_LEAVES: list[Any] = [
    None,
    "bogus",
    b"bytes",
    [],
    {},
    (),
    True,
    False,
    0,
    -1,
    -50,
    1,
    2,
    5,
    999,
    10**30,
    1.5,
    -0.5,
    float("nan"),
    float("inf"),
    -float("inf"),
    1e308,
    1e-320,
    np.float64("nan"),
    np.int64(-3),
    np.array([]),
    np.array([1.0, 2.0]),
    np.zeros((2, 2)),
    object(),
]

# Whole "states" that are not states.
NOT_STATES: list[Any] = [None, [], (), "state", 5, 1.5, {}, {"version": 1}, {"dense": [99]}, object()]

ARRAY_ELEMENT_VALUES: list[float] = [np.nan, np.inf, -np.inf, -1.0, -1e-9, 1e308, 2**40, 0.0, 1.0, 3.0]


def leaf_paths(state: Any, prefix: Path = ()) -> list[Path]:
    """Every path to a leaf and to an inner container (containers too: they can be replaced whole)."""
    paths: list[Path] = []
    if isinstance(state, dict):
        for key, value in state.items():
            paths.append((*prefix, key))
            paths.extend(leaf_paths(value, (*prefix, key)))
    elif isinstance(state, (list, tuple)) and len(state) <= 64:
        for i, value in enumerate(state):
            paths.append((*prefix, i))
            paths.extend(leaf_paths(value, (*prefix, i)))
    return paths


def get_at(state: Any, path: Path) -> Any:
    for key in path:
        state = state[key]
    return state


def set_at(state: Any, path: Path, value: Any) -> Any:
    """``state`` with the value at ``path`` replaced (tuples are rebuilt, dicts and lists copied)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(state, dict):
        out = dict(state)
        out[head] = set_at(state[head], rest, value)
        return out
    items = list(state)
    items[head] = set_at(items[head], rest, value)
    return tuple(items) if isinstance(state, tuple) else items


def drop_at(state: Any, path: Path) -> Any:
    """``state`` without the dict key at ``path`` (a list element is dropped likewise)."""
    parent = get_at(state, path[:-1])
    if isinstance(parent, dict):
        smaller: Any = {k: v for k, v in parent.items() if k != path[-1]}
    else:
        smaller = [v for i, v in enumerate(parent) if i != path[-1]]
        smaller = tuple(smaller) if isinstance(parent, tuple) else smaller
    return set_at(state, path[:-1], smaller)


def _as_array(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return np.asarray(value.detach().cpu().numpy())
    return None


@st.composite
def _array_edit(draw: st.DrawFn, array: np.ndarray) -> Any:
    edits = ["element", "truncate", "extend", "recast", "reshape", "shuffle", "zeros", "duplicate"]
    edit = draw(st.sampled_from(edits))
    out = array.copy()
    if edit == "element" and out.size:
        flat_index = draw(st.integers(0, out.size - 1))
        value = draw(st.sampled_from([*ARRAY_ELEMENT_VALUES, out.size, -out.size - 1, 2**31]))
        if out.dtype.kind == "f":
            with np.errstate(over="ignore"):
                out.flat[flat_index] = value
        elif out.dtype.kind in "iub":
            if not np.isfinite(value):
                out = out.astype(np.float64)
                out.flat[flat_index] = value
            else:
                info = np.iinfo(out.dtype) if out.dtype.kind in "iu" else None
                clipped = value if info is None else min(max(int(value), info.min), info.max)
                out.flat[flat_index] = clipped
        return out
    if edit == "duplicate" and out.size > 1:  # a value from elsewhere: in range, but repeated
        source, target = draw(st.lists(st.integers(0, out.size - 1), min_size=2, max_size=2, unique=True))
        out.flat[target] = out.flat[source]
        return out
    if edit == "truncate" and out.ndim and out.shape[0]:
        return out[: draw(st.integers(0, out.shape[0] - 1))]
    if edit == "extend" and out.ndim:
        return np.concatenate([out, out[:1] if out.shape[0] else np.zeros((1, *out.shape[1:]), out.dtype)])
    if edit == "recast":
        dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_, object, "U3"]))
        with np.errstate(invalid="ignore", over="ignore"):
            return out.astype(dtype)
    if edit == "reshape" and out.size:
        return out.reshape(-1) if out.ndim > 1 else out.reshape(1, -1)
    if edit == "shuffle" and out.ndim and out.shape[0] > 1:
        return out[draw(st.permutations(list(range(out.shape[0]))))]
    if edit == "zeros":
        return np.zeros_like(out)
    return out[::-1].copy() if out.ndim else out


@st.composite
def corrupted_states(
    draw: st.DrawFn, state: dict[str, Any], foreign: list[Any] | None = None
) -> tuple[str, Any]:
    """One corruption of ``state`` with a short description; ``foreign`` adds other valid states
    (of another class or configuration) that must be refused as well."""
    kinds = ["replace", "replace", "array", "array", "drop", "extra", "not_state"]
    if foreign:
        kinds.append("foreign")
    kind = draw(st.sampled_from(kinds))
    if kind == "not_state":
        return "not a state", draw(st.sampled_from(NOT_STATES))
    if kind == "foreign":
        assert foreign is not None
        return "foreign state", copy.deepcopy(draw(st.sampled_from(foreign)))
    paths = leaf_paths(state)
    if kind == "extra" or not paths:
        return "extra key", {**state, "unexpected": draw(st.sampled_from(BAD_LEAVES))}
    if kind == "drop":
        path = draw(st.sampled_from(paths))
        return f"dropped {path}", drop_at(state, path)
    if kind == "array":
        array_paths = [p for p in paths if _as_array(get_at(state, p)) is not None]
        if array_paths:
            path = draw(st.sampled_from(array_paths))
            array = _as_array(get_at(state, path))
            assert array is not None
            return f"array edit at {path}", set_at(state, path, draw(_array_edit(array)))
    path = draw(st.sampled_from(paths))
    return f"replaced {path}", set_at(state, path, draw(st.sampled_from(BAD_LEAVES)))


def states_equal(a: Any, b: Any) -> bool:
    """Deep equality of two states: arrays by dtype, shape and values (NaN equal to NaN)."""
    arr_a, arr_b = _as_array(a), _as_array(b)
    if arr_a is not None or arr_b is not None:
        if arr_a is None or arr_b is None or arr_a.dtype != arr_b.dtype or arr_a.shape != arr_b.shape:
            return False
        if arr_a.dtype.kind in "fc":
            return bool(np.array_equal(arr_a, arr_b, equal_nan=True))
        return bool(np.array_equal(arr_a, arr_b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(states_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(states_equal(x, y) for x, y in zip(a, b, strict=False))
        )
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return bool(type(a) is type(b) and a == b)


def check_load(
    target: Any,
    corrupted: Any,
    check_consistent: Callable[[Any], None],
    snapshot: Callable[[Any], Any] | None = None,
) -> bool:
    """Load ``corrupted`` into ``target``: either it raises ``ValueError``/``TypeError`` and
    ``snapshot(target)`` (default: its ``state_dict()``) is unchanged, or it loads and
    ``check_consistent(target)`` holds.  Returns whether the state was accepted."""
    take = snapshot if snapshot is not None else (lambda obj: copy.deepcopy(obj.state_dict()))
    before = take(target)
    try:
        target.load_state_dict(corrupted)
    except (ValueError, TypeError):
        after = take(target)
        assert states_equal(before, after), "a rejected state changed the object"
        return False
    check_consistent(target)
    return True
