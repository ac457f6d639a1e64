"""CleanRL's ``dqn_atari.py``, run unchanged but for gymnasium 1.x renames, timed from its own log.

CleanRL's code is not part of this repository: fetch it into the git-ignored ``.peer/cleanrl/``
(``dqn_atari.py``, the ``cleanrl_utils/`` package it imports and ``SOURCE.txt`` naming the commit).
:func:`run` reads that source, applies :data:`PATCHES` (each a named ``(old, new)`` text
substitution that must match exactly once, or the run stops), writes the patched copy with its
``cleanrl_utils/`` to a temporary folder and runs it there in a subprocess that inherits
``PYTHONPATH``, with the settings of ``benchmarks.atari_loop``: memory capacity 10^6, minibatch 32,
one update per 4 agent steps, a short acting phase, ε ≈ 1 during the window (the ε decay of a
default CleanRL run: 1,000,000 steps).  CleanRL steps one environment (``num_envs = 1`` is asserted)
and its ``global_step`` counts that environment's agent steps (4 frames each).

The agent steps/s are taken from CleanRL's own log: every 100 steps of the learning phase it logs
``SPS = int(global_step / (time.time() - start_time))``; with ``elapsed = step / SPS`` the learning
rate is ``Δstep / Δelapsed`` between the first and last logged points past ``learning_starts``
(:func:`learning_rate`).  The points come from its tensorboard events when the run ends by itself
(their wall times give a second estimate), else from its stdout.

On a GPU machine, after installing the wheels of ``.whl/`` into ``/tmp/site``::

    PYTHONPATH=/tmp/site:$PWD python -m benchmarks.cleanrl_dqn \\
        --source .peer/cleanrl/dqn_atari.py --seconds 60 --device cuda --out cleanrl_dqn.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ENV = "PongNoFrameskip-v4"
#: agent steps of a default CleanRL run's linear ε decay (exploration_fraction 0.1 × 10^7 steps)
EPS_DECAY_STEPS = 1_000_000
#: a first guess of CleanRL's learning-phase steps/s, to size ``--total-timesteps`` from ``--seconds``
EXPECTED_SPS = {"cuda": 700.0, "cpu": 60.0}
LOG_EVERY = 100  # dqn_atari.py logs SPS when global_step % 100 == 0 (and it is a training step)
SPS_LINE = re.compile(r"^SPS:\s*(\d+)\s*$")


@dataclass(frozen=True)
class Patch:
    """One exact text substitution of the CleanRL source; ``old`` must occur exactly once."""

    name: str
    old: str
    new: str
    why: str


_OLD_FINAL_INFO = """\
        if "final_info" in infos:
            for info in infos["final_info"]:
                if info and "episode" in info:
                    print(f"global_step={global_step}, episodic_return={info['episode']['r']}")
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"], global_step)
"""
_NEW_FINAL_INFO = """\
        if "final_info" in infos and "episode" in infos["final_info"]:
            final_info = infos["final_info"]
            for idx in np.flatnonzero(final_info["_episode"]):
                print(f"global_step={global_step}, episodic_return={final_info['episode']['r'][idx]}")
                writer.add_scalar("charts/episodic_return", final_info["episode"]["r"][idx], global_step)
                writer.add_scalar("charts/episodic_length", final_info["episode"]["l"][idx], global_step)
"""

#: The renames gymnasium 1.x / ale-py 0.12 need, and nothing else.
PATCHES: tuple[Patch, ...] = (
    Patch(
        "register_ale_envs",
        "import gymnasium as gym\n",
        "import gymnasium as gym\nimport ale_py\n\ngym.register_envs(ale_py)\n",
        "gymnasium 1.x no longer loads ALE's environments from an entry point: without importing "
        "ale_py, gym.make('PongNoFrameskip-v4') raises NameNotFound",
    ),
    Patch(
        "GrayscaleObservation",
        "gym.wrappers.GrayScaleObservation(env)",
        "gym.wrappers.GrayscaleObservation(env)",
        "renamed in gymnasium 1.0",
    ),
    Patch(
        "FrameStackObservation",
        "gym.wrappers.FrameStack(env, 4)",
        "gym.wrappers.FrameStackObservation(env, 4)",
        "renamed in gymnasium 1.0 (returns an array instead of LazyFrames)",
    ),
    Patch(
        "autoreset_same_step",
        "for i in range(args.num_envs)]\n    )",
        "for i in range(args.num_envs)],\n        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,\n    )",
        "gymnasium 1.x vector envs reset on the step after the episode ends (NEXT_STEP) and give no "
        "final observation; SAME_STEP is gymnasium 0.29's behaviour, which the script is written for",
    ),
    Patch(
        "final_info_layout",
        _OLD_FINAL_INFO,
        _NEW_FINAL_INFO,
        "gymnasium 1.x's infos['final_info'] is one dict of arrays with an '_episode' mask, no longer a "
        "list of per-env dicts",
    ),
    Patch(
        "final_obs_key",
        'infos["final_observation"][idx]',
        'infos["final_obs"][idx]',
        "renamed in gymnasium 1.0 (read only when an episode is truncated)",
    ),
)


def apply_patches(source: str, patches: Sequence[Patch] = PATCHES) -> str:
    """``source`` with every patch applied; ``ValueError`` if an ``old`` does not occur exactly once."""
    for patch in patches:
        count = source.count(patch.old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times"
            raise ValueError(
                f"CleanRL patch {patch.name!r}: its old text is {where} in the source (has dqn_atari.py "
                f"changed?):\n{patch.old}"
            )
        source = source.replace(patch.old, patch.new)
    return source


def learning_rate(
    points: Sequence[tuple[int, float]], learning_starts: int, warmup_steps: int = 0
) -> dict[str, Any]:
    """Steady-state agent steps/s of the learning phase from CleanRL's logged ``(global_step, SPS)``.

    ``SPS`` is the cumulative ``global_step / elapsed``, so ``elapsed = step / SPS``; the rate is
    ``Δstep / Δelapsed`` between the first and the last point with ``step > learning_starts +
    warmup_steps``.  SPS is logged as an int, so each elapsed is over-estimated by at most a factor
    ``1 + 1 / SPS``.
    """
    learning = sorted((int(s), float(v)) for s, v in points if s > learning_starts + warmup_steps and v > 0)
    if len(learning) < 2:
        past = learning_starts + warmup_steps
        raise ValueError(f"need at least 2 logged SPS points past step {past}, got {len(learning)}")
    (s0, v0), (s1, v1) = learning[0], learning[-1]
    elapsed0, elapsed1 = s0 / v0, s1 / v1
    if elapsed1 <= elapsed0:
        raise ValueError(f"logged SPS points give no elapsed time between steps {s0} and {s1}")
    return {
        "agent_steps_per_s": (s1 - s0) / (elapsed1 - elapsed0),
        "first_step": s0,
        "last_step": s1,
        "points": len(learning),
        "elapsed_s": elapsed1 - elapsed0,
    }


def logged_steps(learning_starts: int, train_frequency: int, count: int) -> list[int]:
    """The global steps of the first ``count`` SPS lines of stdout (they print no step).

    dqn_atari.py prints SPS when ``global_step > learning_starts``, ``global_step % train_frequency
    == 0`` and ``global_step % 100 == 0``.
    """
    period = math.lcm(LOG_EVERY, train_frequency)
    first = (learning_starts // period + 1) * period
    return [first + k * period for k in range(count)]


def points_from_stdout(stdout: str, learning_starts: int, train_frequency: int) -> list[tuple[int, float]]:
    """``(global_step, SPS)`` from the ``SPS: N`` lines of CleanRL's stdout."""
    values = [float(m.group(1)) for line in stdout.splitlines() if (m := SPS_LINE.match(line.strip()))]
    return list(zip(logged_steps(learning_starts, train_frequency, len(values)), values, strict=True))


def points_from_tensorboard(run_dir: Path) -> list[tuple[int, float, float]]:
    """``(global_step, SPS, wall_time)`` of every ``charts/SPS`` event under ``run_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: list[tuple[int, float, float]] = []
    for events in sorted(run_dir.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        accumulator.Reload()
        if "charts/SPS" in accumulator.Tags().get("scalars", []):
            points += [(e.step, e.value, e.wall_time) for e in accumulator.Scalars("charts/SPS")]
    return sorted(set(points))


def source_commit(source: Path) -> str | None:
    """The commit named by ``SOURCE.txt`` next to the source (``commit: <sha>``), if any."""
    info = source.parent / "SOURCE.txt"
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("commit:"):
                return line.split(":", 1)[1].strip()
    return None


def cleanrl_args(
    env_id: str,
    total_timesteps: int,
    learning_starts: int,
    buffer_size: int,
    device: str,
    seed: int,
    eps_decay_steps: int,
) -> list[str]:
    """The command-line arguments of dqn_atari.py (tyro: booleans are ``--flag`` / ``--no-flag``)."""
    return [
        "--env-id",
        env_id,
        "--total-timesteps",
        str(total_timesteps),
        "--learning-starts",
        str(learning_starts),
        "--buffer-size",
        str(buffer_size),
        "--batch-size",
        "32",
        "--train-frequency",
        "4",
        # ε decays over eps_decay_steps as in a default run (0.1 × 10^7), not 10% of this short run
        "--exploration-fraction",
        repr(eps_decay_steps / total_timesteps),
        "--seed",
        str(seed),
        "--no-track",
        "--no-capture-video",
        "--cuda" if device == "cuda" else "--no-cuda",
    ]


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    # the child runs in a temporary folder: make relative PYTHONPATH entries absolute
    paths = [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"  # stdout survives a kill
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def run(
    source: Path,
    seconds: float = 60.0,
    device: str = "cuda",
    env_id: str = DEFAULT_ENV,
    learning_starts: int = 5_000,
    buffer_size: int = 1_000_000,
    total_timesteps: int | None = None,
    expected_sps: float | None = None,
    timeout_s: float | None = None,
    warmup_steps: int = 0,
    seed: int = 1,
    threads: int = 1,
    eps_decay_steps: int = EPS_DECAY_STEPS,
) -> dict[str, Any]:
    """Run the patched dqn_atari.py once and return its learning-phase agent steps/s (see the module doc)."""
    import torch

    if device not in ("cuda", "cpu"):
        raise ValueError(f"device should be 'cuda' or 'cpu', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "--device cuda, but torch.cuda.is_available() is False (CleanRL would fall back to CPU)"
        )
    source = Path(source).resolve()
    utils = source.parent / "cleanrl_utils"
    if not utils.is_dir():
        raise FileNotFoundError(f"{utils} (the package dqn_atari.py imports) is missing next to {source}")
    if total_timesteps is None:
        rate = expected_sps if expected_sps is not None else EXPECTED_SPS[device]
        total_timesteps = learning_starts + max(int(rate * seconds), 2 * LOG_EVERY)
    if timeout_s is None:
        timeout_s = 1.5 * seconds + 60
    args = cleanrl_args(env_id, total_timesteps, learning_starts, buffer_size, device, seed, eps_decay_steps)
    patched = apply_patches(source.read_text())

    with tempfile.TemporaryDirectory(prefix="cleanrl_dqn_") as tmp:
        work = Path(tmp)
        shutil.copytree(utils, work / "cleanrl_utils", ignore=shutil.ignore_patterns("__pycache__"))
        script = work / source.name  # the same file name: CleanRL's exp_name is the script's name
        script.write_text(patched)
        command = [sys.executable, str(script), *args]
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            cwd=work,
            env=_child_env(threads),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout_s)
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            killed = True
        wall_s = time.perf_counter() - started
        if process.returncode != 0 and not killed:
            sys.stderr.write(output[-8000:])
            raise RuntimeError(f"dqn_atari.py exited with {process.returncode}")
        walltime_rate = None
        if not killed:
            events = points_from_tensorboard(work / "runs")
            points = [(s, v) for s, v, _ in events]
            log_source = "tensorboard"
            timed = [(s, w) for s, _, w in events if s > learning_starts + warmup_steps]
            if len(timed) >= 2 and timed[-1][1] > timed[0][1]:
                walltime_rate = (timed[-1][0] - timed[0][0]) / (timed[-1][1] - timed[0][1])
        else:
            points = points_from_stdout(output, learning_starts, 4)
            log_source = "stdout"
    rate_info = learning_rate(points, learning_starts, warmup_steps)
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "CPU",
        "cleanrl_commit": source_commit(source),
        "patches": [{"name": p.name, "old": p.old, "new": p.new, "why": p.why} for p in PATCHES],
        "args": args,
        "agent_steps_per_s_learning": rate_info["agent_steps_per_s"],
        "agent_steps_per_s_learning_walltime": walltime_rate,
        "last_logged_sps": points[-1][1] if points else None,
        # agent steps the run made: all of them when it ended by itself, else at least the last logged
        "steps": total_timesteps if not killed else (points[-1][0] if points else None),
        "last_logged_step": points[-1][0] if points else None,
        "wall_s": wall_s,
        "learning_window": {k: rate_info[k] for k in ("first_step", "last_step", "points", "elapsed_s")},
        "log_source": log_source,
        "ended": "killed" if killed else "clean",
        "total_timesteps": total_timesteps,
        "timeout_s": timeout_s,
        "threads": threads,
        "env_id": env_id,
        "versions": _versions(),
        "stdout_tail": output[-2000:],
    }


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in ("torch", "numpy", "gymnasium", "ale-py", "tyro", "tensorboard"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, default=Path(".peer/cleanrl/dqn_atari.py"))
    parser.add_argument("--seconds", type=float, default=60.0, help="intended length of the run")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--env-id", default=DEFAULT_ENV)
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--buffer-size", type=int, default=1_000_000)
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="default: learning_starts + expected_sps × seconds",
    )
    parser.add_argument("--expected-sps", type=float, default=None, help=f"default: {EXPECTED_SPS}")
    parser.add_argument(
        "--timeout", type=float, default=None, help="kill after this (default 1.5 × seconds + 60)"
    )
    parser.add_argument("--warmup-steps", type=int, default=0, help="learning steps left out of the rate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="OMP/MKL threads of the CleanRL process")
    parser.add_argument("--out", type=Path, default=None)
    a = parser.parse_args(argv)
    result = run(
        a.source,
        a.seconds,
        a.device,
        a.env_id,
        a.learning_starts,
        a.buffer_size,
        a.total_timesteps,
        a.expected_sps,
        a.timeout,
        a.warmup_steps,
        a.seed,
        a.threads,
    )
    result["command"] = "python -m benchmarks.cleanrl_dqn " + " ".join(sys.argv[1:] if argv is None else argv)
    text = json.dumps(result, indent=1) + "\n"
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
        print(f"wrote {a.out}")
    summary = {
        k: result[k] for k in ("device", "agent_steps_per_s_learning", "last_logged_sps", "steps", "wall_s")
    }
    print(json.dumps(summary))
    return result


if __name__ == "__main__":
    main()
