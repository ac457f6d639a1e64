"""benchmarks/cleanrl_dqn.py without CleanRL's source: the patches on a fake source, the rate from the log."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from benchmarks import cleanrl_dqn as bench


def fake_source() -> str:
    """Every patched passage of dqn_atari.py, in a script that compiles."""
    return (
        "import gymnasium as gym\n"
        "import numpy as np\n\n\n"
        "def make_env(env):\n"
        "    env = gym.wrappers.GrayScaleObservation(env)\n"
        "    env = gym.wrappers.FrameStack(env, 4)\n"
        "    return env\n\n\n"
        "def main(args, writer, make_env, step):\n"
        "    envs = gym.vector.SyncVectorEnv(\n"
        "        [make_env(args.env_id, args.seed + i) for i in range(args.num_envs)]\n"
        "    )\n"
        "    for global_step in range(10):\n"
        "        next_obs, rewards, terminations, truncations, infos = step(envs)\n"
        + bench._OLD_FINAL_INFO
        + "        real_next_obs = next_obs.copy()\n"
        "        for idx, trunc in enumerate(truncations):\n"
        "            if trunc:\n"
        '                real_next_obs[idx] = infos["final_observation"][idx]\n'
    )


def test_patches_apply_once_each_and_compile() -> None:
    patched = bench.apply_patches(fake_source())
    for patch in bench.PATCHES:
        assert patch.new in patched
        assert patch.old not in patched or patch.old in patch.new
    compile(patched, "dqn_atari.py", "exec")
    assert "gym.register_envs(ale_py)" in patched
    assert "autoreset_mode=gym.vector.AutoresetMode.SAME_STEP" in patched
    assert 'infos["final_obs"][idx]' in patched


def test_final_info_patch_reads_gymnasium_1x_layout() -> None:
    """The patched block on an infos dict as gymnasium 1.x's SAME_STEP vector env gives it."""
    np = pytest.importorskip("numpy")
    infos = {
        "final_info": {
            "episode": {"r": np.array([0.0, -21.0]), "l": np.array([0, 812])},
            "_episode": np.array([False, True]),
        },
        "_final_info": np.array([False, True]),
    }
    logged: list[tuple[str, float, int]] = []

    class Writer:
        def add_scalar(self, tag: str, value: float, step: int) -> None:
            logged.append((tag, float(value), step))

    exec(
        textwrap.dedent(bench._NEW_FINAL_INFO),
        {"np": np, "infos": infos, "writer": Writer(), "global_step": 7},
    )
    assert logged == [("charts/episodic_return", -21.0, 7), ("charts/episodic_length", 812.0, 7)]


@pytest.mark.parametrize("count", [0, 2])
def test_patch_fails_loudly_unless_found_once(count: int) -> None:
    source = fake_source().replace("gym.wrappers.FrameStack(env, 4)\n", "x\n" if count == 0 else "")
    if count == 2:
        source += "gym.wrappers.FrameStack(env, 4)\ngym.wrappers.FrameStack(env, 4)\n"
    with pytest.raises(ValueError, match="FrameStackObservation"):
        bench.apply_patches(source)


def cleanrl_log(
    acting_sps: float, learning_sps: float, learning_starts: int, steps: int
) -> list[tuple[int, float]]:
    """(global_step, int SPS) as dqn_atari.py logs them: every 100 learning steps, cumulative, truncated."""
    points = []
    for step in range(100, steps + 1, 100):
        if step > learning_starts:
            elapsed = learning_starts / acting_sps + (step - learning_starts) / learning_sps
            points.append((step, float(int(step / elapsed))))
    return points


def test_learning_rate_from_cumulative_sps() -> None:
    points = cleanrl_log(acting_sps=2000.0, learning_sps=400.0, learning_starts=5000, steps=30_000)
    info = bench.learning_rate(points, learning_starts=5000)
    assert info["agent_steps_per_s"] == pytest.approx(400.0, rel=0.01)
    assert (info["first_step"], info["last_step"], info["points"]) == (5100, 30_000, 250)
    # the last logged SPS mixes in the fast acting phase
    assert points[-1][1] > 450
    warm = bench.learning_rate(points, learning_starts=5000, warmup_steps=1000)
    assert warm["first_step"] == 6100
    with pytest.raises(ValueError, match="at least 2"):
        bench.learning_rate(points[:1], learning_starts=5000)


def test_points_from_stdout() -> None:
    stdout = (
        "A.L.E: Arcade Learning Environment\nSPS: 294\nglobal_step=958, episodic_return=-20.0\nSPS: 207\n"
    )
    assert bench.points_from_stdout(stdout, learning_starts=500, train_frequency=4) == [
        (600, 294.0),
        (700, 207.0),
    ]
    assert bench.logged_steps(5000, 4, 2) == [5100, 5200]
    assert bench.logged_steps(5000, 8, 2) == [5200, 5400]  # lcm(100, 8) = 200


def test_points_from_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "runs" / "x"))
    for step, sps in [(600, 294), (700, 207)]:
        writer.add_scalar("charts/SPS", sps, step)
    writer.add_scalar("losses/td_loss", 1.0, 600)
    writer.close()
    points = bench.points_from_tensorboard(tmp_path / "runs")
    assert [(s, v) for s, v, _ in points] == [(600, 294.0), (700, 207.0)]


def test_cleanrl_args() -> None:
    args = bench.cleanrl_args("PongNoFrameskip-v4", 50_000, 5000, 1_000_000, "cuda", 1, 1_000_000)
    assert args[args.index("--exploration-fraction") + 1] == "20.0"
    assert {"--no-track", "--no-capture-video", "--cuda"} <= set(args)
    assert "--no-cuda" in bench.cleanrl_args("PongNoFrameskip-v4", 50_000, 5000, 10, "cpu", 1, 10)


def test_source_commit(tmp_path: Path) -> None:
    (tmp_path / "SOURCE.txt").write_text("repo: https://github.com/vwxyzjn/cleanrl\ncommit: abc123\n")
    assert bench.source_commit(tmp_path / "dqn_atari.py") == "abc123"
    assert bench.source_commit(tmp_path / "sub" / "dqn_atari.py") is None
