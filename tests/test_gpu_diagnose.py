"""The GPU session's device stage without a GPU: ``benchmarks/gpu_diagnose.py`` run on CPU tensors
(every phase but the CUDA comparison, which skips), and ``benchmarks/gpu_session.sh``'s syntax and
its device stage's steps, whose limits must leave room in one 600 s call."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_diagnose

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_session.sh"


@pytest.mark.parametrize("device", ["cpu", "cpu:0"])
def test_the_diagnosis_runs_on_cpu_tensors_and_finds_nothing_wrong(device: str, tmp_path: Path) -> None:
    out = tmp_path / "diagnose.json"
    assert gpu_diagnose.main(["--device", device, "--steps", "6", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    devices = result["devices"]
    assert devices["memory"] == devices["sampler"] == devices["draw_indices"] == "cpu"
    assert devices["draw_on_memory_device"] is True
    assert result["device_update"] == {"device_update_ran": True, "sync_free": None}
    captured = result["captured_vs_eager"]
    assert captured["steps"] == 6 and captured["graph"] is False
    assert captured["same"] == dict.fromkeys(
        ("indices", "weights", "priorities", "dropped", "rng", "beta_step"), True
    )
    assert captured["rng_advanced_as_expected"] is True
    assert captured["dropped"] == captured["dropped_expected"] == 6 * 8
    if not torch.cuda.is_available():
        assert result["cpu_vs_cuda"] == {"skipped": "no CUDA"}


def test_the_device_comparison_finds_two_cpu_spellings_identical() -> None:
    """The CPU-against-CUDA phase's comparison, run between two CPU devices: the same draws and
    the same bits in every sum."""
    result = gpu_diagnose.compare_devices("cpu", "cpu:0")
    assert result["identical_indices_share"] == 1.0 and result["priorities_equal"] is True
    assert result["sums_max_ulp"] == 0
    assert len(result["sums_max_ulp_per_level"]) == 4  # 512 slots: the leaves, 2 levels, the root


def test_the_diagnosis_reports_a_captured_step_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replayed step that skips its staging (β, new rows) is what the comparison must catch:
    a planted fault (the stage made a no-op) turns ``all_same`` false and the exit status 1."""
    monkeypatch.setattr(gpu_diagnose.PrioritizedReplay, "stage_device_step", lambda self: None)
    result = gpu_diagnose.diagnose("cpu", steps=4)
    assert result["captured_vs_eager"]["all_same"] is False
    assert gpu_diagnose.main(["--device", "cpu", "--steps", "4"]) == 1


def test_a_failing_phase_is_reported_and_the_next_ones_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(device: str) -> dict[str, object]:
        raise RuntimeError("planted")

    monkeypatch.setattr(gpu_diagnose, "_phase_devices", broken)
    result = gpu_diagnose.diagnose("cpu", steps=2)
    assert "planted" in result["devices"]["error"] and "Traceback" in result["devices"]["traceback"]
    assert result["captured_vs_eager"]["all_same"] is True


def _dry_run(stage: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DRY_RUN": "1", "OUT": str(tmp_path)}
    return subprocess.run(["bash", str(SCRIPT), stage], capture_output=True, text=True, env=env, timeout=30)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_session_script_parses_and_its_device_stage_fits_one_call(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, timeout=30).returncode == 0
    done = _dry_run("device", tmp_path)
    assert done.returncode == 0, done.stderr
    steps = re.findall(r"^step (\S+) (\d+) (.*)$", done.stdout, flags=re.M)
    assert [name for name, _, _ in steps] == [
        "gpu_diagnose",
        "gpu_device_tests",
        "replay_device_graph",
        "atari_loop_gpu",
    ]
    assert sum(int(limit) for _, limit, _ in steps) <= 450  # room for installs and start-up in 600 s
    assert "benchmarks.gpu_diagnose --device cuda" in steps[0][2]
    assert "--fill" in steps[2][2]  # the fill sized by the tree's capacity, not the memory's
    for _, _, command in steps:  # every JSON written where the call brings it back
        for out in re.findall(r"--\w*out (\S+)", command):
            assert out.startswith(str(tmp_path))
    assert _dry_run("nonsense", tmp_path).returncode == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("stage", ["smoke", "final", "sweep", "replay", "device", "apex", "pong"])
def test_every_stage_of_the_session_script_fits_one_call(stage: str, tmp_path: Path) -> None:
    done = _dry_run(stage, tmp_path)
    assert done.returncode == 0, done.stderr
    limits = [int(limit) for limit in re.findall(r"^step \S+ (\d+) ", done.stdout, flags=re.M)]
    assert limits, done.stdout
    assert sum(limits) <= 450  # one call is 600 s, wheels and the machine's start included


def test_the_fused_kernels_phase_compares_them_with_the_tensor_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phase a GPU run uses to check the Triton kernels, run here under Triton's CPU
    interpreter: identical steps; a planted fault in the fused draw (its slots moved by one)
    is reported."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert gpu_diagnose._phase_fused_vs_tensor_ops("cpu") == {
        "skipped": "the fused kernels need CUDA and Triton"
    }
    result = gpu_diagnose.compare_paths("cpu", steps=3)
    assert result == {
        "steps": 3,
        "same": dict.fromkeys(("indices", "weights", "nodes", "raw"), True),
        "identical": True,
    }
    from prisample import _device_kernels

    draw = _device_kernels.draw

    def shifted(tree: object, state: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        slots, p = draw(tree, state, k)  # type: ignore[arg-type]
        return (slots + 1) % 512, p

    monkeypatch.setattr(_device_kernels, "draw", shifted)
    assert gpu_diagnose.compare_paths("cpu", steps=3)["identical"] is False
