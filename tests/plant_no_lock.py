"""Planted bug for the thread tests: a lock swapped for a no-op.

* ``sampler``: every sampler's lock (``tests/test_threads.py``);
* ``replay``: ``PrioritizedReplay.lock`` only (``tests/test_replay_threads.py``): the sampler keeps
  its own lock, so each sampler call stays atomic; what goes is the replay's composite step (memory
  write + sampler add/remove, draw + gather + draw record, generation check + update).

Run from the repository root: ``python tests/plant_no_lock.py {sampler,replay} RUNS [CASE ...]
[--locked]``.  Each case (a ``-k`` expression) runs ``RUNS`` times in a child process, restarted
after a crash (which counts as a failure); prints failures per case and the commonest messages.
``--locked`` keeps the lock: every run should pass.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import subprocess
import sys

ROOT = os.getcwd()
TESTS = {"sampler": "tests/test_threads.py", "replay": "tests/test_replay_threads.py"}
BACKENDS = ("proportional", "rank", "greedy", "uniform")
CASES = {
    "sampler": [
        *(f"{b}-{c}" for b in BACKENDS for c in ("plain", "corrections")),
        "ledger_iteration",
        "two_threads",
    ],
    "replay": [
        *(f"{b}-{n}-None" for b in BACKENDS for n in (1, 3)),
        "proportional-3-cpu",
        "prefetch_with_actors",
    ],
}


class NoLock:
    """A do-nothing context manager in C (``"".format`` takes any arguments, returns ``""``)."""

    __enter__ = "".format
    __exit__ = "".format


def plant(target: str) -> None:
    if target == "sampler":
        import prisample.sampler as sampler_module

        sampler_module.check_lock = lambda lock: NoLock()  # type: ignore[assignment,return-value]
    else:
        from prisample.replay import PrioritizedReplay

        PrioritizedReplay.lock = property(lambda self: NoLock())  # type: ignore[assignment,method-assign]


def child(target: str, case: str, runs: int, locked: bool) -> None:
    sys.path.insert(0, ROOT)
    import pytest

    if not locked:
        plant(target)
    for _ in range(runs):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            args = ["-q", "-x", "-k", case, "-p", "no:cacheprovider", "--tb=line"]
            code = pytest.main([TESTS[target], *args])
        lines = [line for line in out.getvalue().splitlines() if "Error" in line]
        print("RESULT", int(code != 0), lines[0][-120:] if code and lines else "", flush=True)


def main() -> None:
    target, runs, locked = sys.argv[1], int(sys.argv[2]), "--locked" in sys.argv
    if target not in TESTS:
        raise SystemExit(__doc__)
    cases = [c for c in sys.argv[3:] if not c.startswith("--")] or CASES[target]
    for case in cases:
        fails, done, kinds = 0, 0, collections.Counter[str]()
        while done < runs:
            mode = "locked" if locked else "nolock"
            argv = [sys.executable, __file__, "child", target, case, str(runs - done), mode]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            for line in proc.stdout.splitlines():
                if line.startswith("RESULT"):
                    _, failed, message = [*line.split(" ", 2), ""][:3]
                    fails, done = fails + int(failed), done + 1
                    if failed == "1":
                        kinds[message] += 1
            if proc.returncode != 0:
                fails, done = fails + 1, done + 1
                kinds[f"crash, exit status {proc.returncode}"] += 1
        print(f"{case:26s} {'locked' if locked else 'no lock'}: failed {fails}/{runs}", flush=True)
        for message, n in kinds.most_common(3):
            print(f"    {n}x {message}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "locked")
    else:
        main()
