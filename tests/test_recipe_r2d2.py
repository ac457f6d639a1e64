"""The R2D2 recipe: value rescaling, n-step targets, the learner's start state, the T-maze, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gymnasium")

from recipes.r2d2 import agent  # noqa: E402
from recipes.r2d2.envs import CORRIDOR, CUE_DOWN, CUE_UP, JUNCTION, MaskedCartPole, TMaze  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# -- value rescaling ------------------------------------------------------------------------------------


def test_value_rescaling_and_its_inverse_are_exact() -> None:
    x = torch.tensor([-1e4, -37.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 3.0, 99.0, 1e5], dtype=torch.float64)
    eps = 1e-3
    h = agent.value_rescale(x, eps)
    expected = torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x
    assert torch.equal(h, expected)
    torch.testing.assert_close(agent.value_rescale_inverse(h, eps), x, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        agent.value_rescale(agent.value_rescale_inverse(x, eps), eps), x, rtol=1e-10, atol=1e-10
    )
    # h(3) = √4 − 1 + 3ε = 1 + 3ε exactly
    assert float(agent.value_rescale(torch.tensor(3.0, dtype=torch.float64), eps)) == 1.0 + 3 * eps


# -- n-step targets -------------------------------------------------------------------------------------


def naive_targets(reward: Any, discount: Any, valid: Any, bootstrap: Any, n: int, eps: float | None) -> Any:
    """Y_j step by step: sum up to n valid rewards inside the window, bootstrap after them."""
    batch, window = reward.shape
    out = np.zeros((batch, window))
    for b in range(batch):
        for j in range(window):
            ret, scale, t = 0.0, 1.0, j
            while t < window and t - j < n and valid[b, t]:
                ret += scale * reward[b, t]
                scale *= discount[b, t]
                t += 1
            if eps is None:
                out[b, j] = ret + scale * bootstrap[b, t]
            else:
                inv = agent.value_rescale_inverse(torch.tensor(bootstrap[b, t], dtype=torch.float64), eps)
                out[b, j] = float(agent.value_rescale(ret + scale * inv, eps))
    return out


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_n_step_targets_match_a_naive_loop(eps: float | None) -> None:
    rng = np.random.default_rng(0)
    batch, window, n = 6, 9, 4
    reward = rng.normal(size=(batch, window))
    discount = np.where(rng.random((batch, window)) < 0.15, 0.0, 0.9)
    lengths = np.array([9, 9, 1, 4, 7, 2])
    valid = np.arange(window)[None, :] < lengths[:, None]
    bootstrap = rng.normal(size=(batch, window + 1)) * 5
    got = agent.n_step_targets(
        torch.tensor(reward), torch.tensor(discount), torch.tensor(valid), torch.tensor(bootstrap), n, eps
    )
    want = naive_targets(reward, discount, valid, bootstrap, n, eps)
    np.testing.assert_allclose(got.numpy()[valid], want[valid], rtol=1e-10, atol=1e-10)


def test_double_q_bootstrap_takes_the_target_value_of_the_online_argmax() -> None:
    online = torch.tensor([[[1.0, 3.0, 2.0]], [[5.0, 0.0, 1.0]]])
    target = torch.tensor([[[10.0, 20.0, 30.0]], [[40.0, 50.0, 60.0]]])
    assert agent.double_q_bootstrap(online, target).tolist() == [[20.0], [40.0]]


# -- stored state and burn-in ------------------------------------------------------------------------


def fake_batch(state: dict[str, np.ndarray] | None, burn_in: int, length: int) -> SimpleNamespace:
    rng = np.random.default_rng(1)
    batch, window = 3, burn_in + length
    valid = np.ones((batch, window), bool)
    valid[2, burn_in + 2 :] = False  # the last item ends 2 steps after its burn-in (padded)
    learn = valid.copy()
    learn[:, :burn_in] = False
    return SimpleNamespace(
        obs=rng.normal(size=(batch, window + 1, 2)).astype(np.float32),
        action=rng.integers(0, 2, (batch, window)),
        reward=rng.normal(size=(batch, window)).astype(np.float32),
        discount=np.full((batch, window), 0.9, np.float32),
        valid=valid,
        learn=learn,
        state=state,
        weights=np.ones(batch, np.float32),
    )


class Recording(agent.RecurrentQNetwork):
    """Records the state each unroll starts from."""

    def __init__(self) -> None:
        super().__init__((2,), 2, "mlp", 8, 4)
        self.starts: list[tuple[int, Any]] = []

    def forward(self, obs, state):  # type: ignore[no-untyped-def]
        self.starts.append((obs.shape[1], state[0].clone()))
        return super().forward(obs, state)


def loss_of(q, q_target, batch, burn_in: int, stored: bool):  # type: ignore[no-untyped-def]
    return agent.sequence_loss(
        q,
        q_target,
        batch,
        burn_in=burn_in,
        n=3,
        gamma_eps=1e-3,
        stored_state=stored,
        device=torch.device("cpu"),
    )


def test_the_learner_starts_both_lstms_from_the_batch_state_and_burns_in() -> None:
    torch.manual_seed(0)
    q, q_target = Recording(), Recording()
    h = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    batch = fake_batch({"h": h, "c": -h}, burn_in=3, length=4)
    out = loss_of(q, q_target, batch, 3, stored=True)
    assert q_target.starts[0][0] == 8 and torch.equal(q_target.starts[0][1], torch.from_numpy(h))
    (burn_steps, burn_start), (after_steps, after_start) = q.starts
    assert burn_steps == 3 and torch.equal(burn_start, torch.from_numpy(h))
    assert after_steps == 5  # the learn steps and the bootstrap observation, from the burnt-in state
    _, warmed = agent.RecurrentQNetwork.forward(
        q, torch.from_numpy(batch.obs[:, :3]), (torch.from_numpy(h), torch.from_numpy(-h))
    )
    torch.testing.assert_close(after_start, warmed[0])
    learn = torch.from_numpy(batch.learn)
    assert torch.all(out.td[~learn] == 0) and torch.all(out.td[learn] != 0)  # padded steps: no error
    # the state matters: another stored state changes the loss
    other = loss_of(q, q_target, fake_batch({"h": -h, "c": h}, 3, 4), 3, stored=True)
    assert float(other.loss.detach()) != float(out.loss.detach())


def test_the_zero_state_arm_ignores_the_batch_state() -> None:
    torch.manual_seed(0)
    q, q_target = Recording(), Recording()
    h = np.ones((3, 4), np.float32)
    a = loss_of(q, q_target, fake_batch({"h": h, "c": h}, 0, 4), 0, stored=False)
    b = loss_of(q, q_target, fake_batch({"h": -h, "c": 3 * h}, 0, 4), 0, stored=False)
    assert all(torch.all(start == 0) for _, start in q.starts + q_target.starts)
    assert float(a.loss.detach()) == float(b.loss.detach())


def test_burn_in_steps_give_no_gradient_to_the_loss() -> None:
    torch.manual_seed(0)
    q, q_target = agent.RecurrentQNetwork((2,), 2, "mlp", 8, 4), agent.RecurrentQNetwork((2,), 2, "mlp", 8, 4)
    h = np.zeros((3, 4), np.float32)
    batch = fake_batch({"h": h, "c": h}, 3, 4)
    obs = torch.tensor(batch.obs, requires_grad=True)
    batch.obs = obs
    loss_of(q, q_target, batch, 3, stored=True).loss.backward()
    assert obs.grad is not None
    assert torch.all(obs.grad[:, :3] == 0) and torch.any(obs.grad[:, 3:7] != 0)


# -- tasks ----------------------------------------------------------------------------------------------


def test_tmaze_rules() -> None:
    env = TMaze(length=3)
    obs, info = env.reset(seed=0)
    cue_up = info["cue_up"]
    assert np.array_equal(obs, CUE_UP if cue_up else CUE_DOWN)
    obs, reward, terminated, _, _ = env.step(3)  # west at the start: a wall
    assert reward == -0.1 and not terminated and np.array_equal(obs, CUE_UP if cue_up else CUE_DOWN)
    obs, reward, *_ = env.step(0)  # north in the corridor's first cell: a wall
    assert reward == -0.1
    for expected in (CORRIDOR, CORRIDOR, JUNCTION):
        obs, reward, terminated, _truncated, _ = env.step(1)
        assert np.array_equal(obs, expected) and reward == 0.0 and not terminated
    _, reward, terminated, _, _ = env.step(0 if cue_up else 2)
    assert terminated and reward == 4.0
    env.reset(seed=0)
    for _ in range(3):
        env.step(1)
    _, reward, terminated, _, _ = env.step(2 if cue_up else 0)
    assert terminated and reward == -0.1
    cues = {TMaze(5).reset(seed=s)[1]["cue_up"] for s in range(20)}
    assert cues == {True, False}
    short = TMaze(length=2, max_steps=4)
    short.reset(seed=1)
    ends = [short.step(3)[3] for _ in range(4)]
    assert ends == [False, False, False, True]
    with pytest.raises(ValueError, match="length"):
        TMaze(length=0)
    with pytest.raises(ValueError, match="action"):
        short.step(7)


def test_masked_cartpole_observes_position_and_angle_only() -> None:
    env = MaskedCartPole()
    obs, _ = env.reset(seed=3)
    full = env.unwrapped.state  # type: ignore[attr-defined]
    assert obs.shape == (2,) and np.allclose(obs, [full[0], full[2]])


# -- the command line ---------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "recipes.r2d2", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_arguments_print_the_usage() -> None:
    done = run_cli()
    assert done.returncode == 0 and "usage: python -m recipes.r2d2 {train,study}" in done.stdout


def test_a_short_training_run_writes_its_curve(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    done = run_cli(
        "train", "--yes", "--preset", "tmaze", "--task_options", '{"length": 4}', "--total_steps", "400",
        "--learning_starts", "160", "--eval_every", "200", "--eval_episodes", "2", "--batch_size", "4",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["eval_steps"] == [200, 400] and len(record["returns"]) == 2
    assert record["updates"] > 0 and record["items"] > 0 and record["config"]["task"] == "TMaze"
