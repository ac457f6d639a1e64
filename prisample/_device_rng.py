"""Uniform random numbers on a torch device from a 64-bit counter: SplitMix64 (Steele, Lea and
Flood 2014) as int64 tensor operations.

The whole state is one 0-d int64 tensor ``s`` on the device: draw ``j`` of a batch of ``k`` is
``mix(s + γ (j + 1))`` and the batch advances ``s`` by ``γ k`` in place.  Nothing is read back to
the host, the same state gives the same numbers on every device (integer arithmetic), and the
state fits the 128-bit PCG64 state a :class:`~prisample.PrioritizedSampler` checkpoint holds, so
device and host samplers share one checkpoint format.  A ``torch.Generator`` has none of the
last two properties (its CPU state is 5 KB of Mersenne Twister).

int64 multiplication and addition wrap modulo ``2^64`` on CPU and CUDA; ``>>`` is arithmetic on
int64, so each logical shift is masked.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["SplitMix64", "mix_int", "pcg64_to_word", "uniform", "word_to_pcg64"]

_MASK64 = (1 << 64) - 1
# A fixed odd PCG64 increment for the checkpoint's "inc" (PCG64 needs an odd one); a device
# sampler reads only "state".
_PCG64_INC = 0xDA3E39CB94B95BDB


def _signed(value: int) -> int:
    """``value`` modulo ``2^64`` as the int64 with the same bits."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GAMMA = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)


def _mix(z: torch.Tensor) -> torch.Tensor:
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * _M1
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * _M2
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def mix_int(value: int) -> int:
    """SplitMix64's output function on a Python integer (seeding)."""
    z = value & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def uniform(state: torch.Tensor, k: int) -> torch.Tensor:
    """``k`` float64 uniforms in ``[0, 1)`` (53 random bits each) from the 0-d int64 ``state``,
    which advances by ``k`` in place: draw ``j`` is ``mix(s + γ (j + 1))``."""
    steps = torch.arange(1, k + 1, dtype=torch.int64, device=state.device) * _GAMMA
    bits = _mix(state + steps)
    state.add_(_signed(_GAMMA * k))
    return ((bits >> 11) & ((1 << 53) - 1)).to(torch.float64) * 2.0**-53


class SplitMix64:
    """A SplitMix64 stream whose state lives in a 0-d int64 tensor on ``device``."""

    def __init__(self, seed: int, device: torch.device) -> None:
        self.device = device
        self.state = torch.tensor(_signed(mix_int(seed)), dtype=torch.int64, device=device)

    def uniform(self, k: int) -> torch.Tensor:
        """``k`` float64 uniforms in ``[0, 1)`` (53 random bits each); advances the state."""
        return uniform(self.state, k)

    def get_word(self) -> int:
        """The state as an unsigned 64-bit integer (synchronises)."""
        return int(self.state.item()) & _MASK64

    def set_word(self, word: int) -> None:
        self.state.fill_(_signed(word))


def word_to_pcg64(word: int) -> dict[str, Any]:
    """A PCG64 bit-generator state (``np.random.PCG64().state``'s form) holding ``word``."""
    return {
        "bit_generator": "PCG64",
        "state": {"state": word, "inc": _PCG64_INC},
        "has_uint32": 0,
        "uinteger": 0,
    }


def pcg64_to_word(rng: np.random.Generator) -> int:
    """The 64-bit word a device stream takes from a PCG64 state: the two halves of its 128-bit
    state xor-ed (a state written by :func:`word_to_pcg64` gives its word back)."""
    state = int(rng.bit_generator.state["state"]["state"])
    return (state ^ (state >> 64)) & _MASK64
