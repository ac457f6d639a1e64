"""VectorStepConverter on gymnasium's SyncVectorEnv: every stored transition is a real one, none lost.

The test environment's observation is ``[episode id, step in episode]`` (episode ids unique across
envs), so a transition that spans an autoreset is visible as a change of episode id, and its log of
the steps it really took is the exact list of transitions a memory should hold.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("gymnasium")

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings

from prisample.replay import PrioritizedReplay
from prisample.replay.vector_env import VectorStepConverter, VectorTransitions
from tests.state_fuzz import check_load, corrupted_states, states_equal

GAMMA = 0.9
NUM_ENVS = 4
EPISODE_IDS = 10_000  # env i numbers its episodes i·10000, i·10000 + 1, ...


class EpisodeStepEnv(gym.Env[Any, np.int64]):
    """Observation ``[episode, step]``; terminates with probability 0.15 per step, truncates at a
    random time limit of 2..8 steps (both at once possible); reward ``1000·action + step``.

    ``log`` holds ``(episode, step before, action, reward, terminated, truncated)`` for every step
    the environment really took: the transitions a replay memory should store."""

    def __init__(self, env_id: int, dict_obs: bool = False) -> None:
        self.dict_obs = dict_obs
        pos = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"pos": pos, "parity": gym.spaces.Discrete(2)}) if dict_obs else pos
        )
        self.action_space = gym.spaces.Discrete(3)
        self.episode = env_id * EPISODE_IDS - 1
        self.t = 0
        self.limit = 0
        self.log: list[tuple[int, int, int, float, bool, bool]] = []

    def _obs(self) -> Any:
        pos = np.array([self.episode, self.t], dtype=np.float32)
        return {"pos": pos, "parity": self.t % 2} if self.dict_obs else pos

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        self.limit = int(self.np_random.integers(2, 9))
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        terminated = bool(self.np_random.random() < 0.15)
        truncated = self.t >= self.limit
        reward = float(1000 * int(action) + self.t)
        self.log.append((self.episode, self.t - 1, int(action), reward, terminated, truncated))
        return self._obs(), reward, terminated, truncated, {}


def make_envs(mode: AutoresetMode, dict_obs: bool = False, n: int = NUM_ENVS) -> SyncVectorEnv:
    return SyncVectorEnv([lambda i=i: EpisodeStepEnv(i, dict_obs) for i in range(n)], autoreset_mode=mode)


def pos(obs: Any) -> np.ndarray:
    return obs["pos"] if isinstance(obs, dict) else obs


def run(
    envs: SyncVectorEnv,
    conv: VectorStepConverter,
    steps: int,
    seed: int = 0,
    store: Callable[[VectorTransitions], None] | None = None,
) -> list[VectorTransitions]:
    """Step ``envs`` with random actions, feeding ``conv``; Disabled mode resets ended envs by hand."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    out = []
    for _ in range(steps):
        action = rng.integers(0, 3, envs.num_envs)
        next_obs, reward, terminated, truncated, infos = envs.step(action)
        rows = conv.step(obs, action, reward, terminated, truncated, next_obs, infos, gamma=GAMMA)
        out.append(rows)
        if store is not None and rows.streams.size:
            store(rows)
        obs = next_obs
        done = terminated | truncated
        if envs.autoreset_mode == AutoresetMode.DISABLED and done.any():
            obs, _ = envs.reset(options={"reset_mask": done})
            conv.reset(done)
    return out


def flat_rows(out: list[VectorTransitions]) -> list[tuple[int, int, int, float, float, bool]]:
    """Each stored transition as ``(episode, step, action, reward, discount, episode_end)``, after
    checking that it stays in one episode of its env and advances one step."""
    rows = []
    for r in out:
        o, n = pos(r.obs), pos(r.next_obs)
        for j, env in enumerate(r.streams):
            assert o[j, 0] == n[j, 0], f"transition spans a reset: {o[j]} -> {n[j]}"
            assert n[j, 1] == o[j, 1] + 1, f"transition skips steps: {o[j]} -> {n[j]}"
            assert o[j, 0] // EPISODE_IDS == env, "transition stored on another env's stream"
            if isinstance(r.obs, dict):
                assert r.obs["parity"][j] == o[j, 1] % 2 and r.next_obs["parity"][j] == n[j, 1] % 2
            rows.append(
                (
                    int(o[j, 0]),
                    int(o[j, 1]),
                    int(r.action[j]),
                    float(r.reward[j]),
                    float(r.discount[j]),
                    bool(r.episode_end[j]),
                )
            )
    return rows


def expected_rows(envs: SyncVectorEnv) -> list[tuple[int, int, int, float, float, bool]]:
    return [
        (episode, step, action, reward, 0.0 if term else GAMMA, term or trunc)
        for env in envs.envs
        for episode, step, action, reward, term, trunc in env.unwrapped.log  # type: ignore[attr-defined]
    ]


MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_stores_exactly_the_real_transitions(mode: AutoresetMode, dict_obs: bool) -> None:
    envs = make_envs(mode, dict_obs)
    conv = VectorStepConverter.for_env(envs)
    assert conv.autoreset_mode == mode.value
    got = flat_rows(run(envs, conv, 150))
    want = expected_rows(envs)
    assert sorted(got) == sorted(want)  # none lost, none invented, every field right
    assert len(got) == len(set(got))
    logs = [entry for env in envs.envs for entry in env.unwrapped.log]  # type: ignore[attr-defined]
    assert sum(t for *_, t, u in logs) > 10, "too few terminations to exercise resets"
    assert sum(u and not t for *_, t, u in logs) > 10, "too few truncations to exercise resets"
    assert sum(t and u for *_, t, u in logs) > 0, "no step both terminated and truncated"


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_detects_the_mode_and_matches_explicit(mode: AutoresetMode) -> None:
    explicit = run(make_envs(mode), VectorStepConverter(NUM_ENVS, autoreset_mode=mode), 60)
    conv = VectorStepConverter(NUM_ENVS)
    assert conv.autoreset_mode is None
    detected = run(make_envs(mode), conv, 60)
    assert conv.autoreset_mode == mode.value
    assert flat_rows(detected) == flat_rows(explicit)


def test_through_prioritized_replay_and_back() -> None:
    """The whole path: SyncVectorEnv → converter → PrioritizedReplay.add_many → get."""
    for mode in MODES:
        envs = make_envs(mode)
        replay = PrioritizedReplay(2000, (2,), obs_dtype=np.float32, num_streams=NUM_ENVS, seed=0)
        slots: list[np.ndarray] = []

        def store(rows: VectorTransitions, replay: PrioritizedReplay = replay, slots: list = slots) -> None:
            slots.append(
                replay.add_many(
                    rows.obs,
                    rows.action,
                    rows.reward,
                    rows.discount,
                    rows.next_obs,
                    episode_end=rows.episode_end,
                    streams=rows.streams,
                )
            )

        out = run(envs, VectorStepConverter.for_env(envs), 150, store=store)
        batch = replay.memory.get(np.concatenate(slots))
        stored = [r for r in out if r.streams.size]
        assert len(replay) == sum(r.streams.size for r in out) == len(expected_rows(envs))
        np.testing.assert_array_equal(batch["obs"], np.concatenate([r.obs for r in stored]))
        np.testing.assert_array_equal(batch["next_obs"], np.concatenate([r.next_obs for r in stored]))
        np.testing.assert_array_equal(batch["action"], np.concatenate([r.action for r in stored]))
        np.testing.assert_array_equal(
            batch["reward"], np.concatenate([r.reward for r in stored]).astype(np.float32)
        )
        ends = np.concatenate([r.episode_end for r in stored])
        terminated = np.concatenate([r.discount for r in stored]) == 0
        assert (batch["discount"][terminated] == 0).all()
        assert (batch["discount"][~terminated] == np.float32(GAMMA)).all()
        assert (ends & ~terminated).any()  # truncated transitions keep γ: they bootstrap
        assert (batch["obs"][:, 0] == batch["next_obs"][:, 0]).all()
        assert (batch["next_obs"][:, 1] == batch["obs"][:, 1] + 1).all()


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_naive_add_many_stores_transitions_across_resets(mode: AutoresetMode) -> None:
    """Contrast (the bug this module fixes): storing every raw vector step with ``add_many``
    stores transitions that span an autoreset (next-step: the reset step joins two episodes;
    same-step: ``next_obs`` of an ended env is already the next episode's first observation)."""
    envs = make_envs(mode)
    replay = PrioritizedReplay(2000, (2,), obs_dtype=np.float32, num_streams=NUM_ENVS, seed=0)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for _ in range(150):
        action = rng.integers(0, 3, NUM_ENVS)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        replay.add_many(
            obs, action, reward, GAMMA * (1.0 - terminated), next_obs, episode_end=terminated | truncated
        )
        obs = next_obs
    batch = replay.memory.get(np.arange(len(replay)))
    invalid = (batch["obs"][:, 0] != batch["next_obs"][:, 0]) | (
        batch["next_obs"][:, 1] != batch["obs"][:, 1] + 1
    )
    assert invalid.sum() > 0
    assert len(replay) - invalid.sum() <= len(expected_rows(envs))


# -- mode mismatches, validation, reset ---------------------------------------------------------


def step_args(n: int = 3, **changes: Any) -> dict[str, Any]:
    """A valid step where no episode ends; ``changes`` replace arguments."""
    args: dict[str, Any] = {
        "obs": np.zeros((n, 2), np.float32),
        "action": np.zeros(n, np.int64),
        "reward": np.ones(n),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "next_obs": np.ones((n, 2), np.float32),
        "infos": {},
        "gamma": GAMMA,
    }
    args.update(changes)
    return args


def same_step_infos(done: np.ndarray, final: Any = None) -> dict[str, Any]:
    finals = np.full(done.shape[0], None, dtype=object)
    for i in np.flatnonzero(done):
        finals[i] = np.full(2, 7.0, np.float32) if final is None else final
    return {"final_obs": finals, "_final_obs": done.copy()}


def ended_next_step() -> VectorStepConverter:
    """A next-step converter whose env 1 just ended (its next step is the reset step)."""
    conv = VectorStepConverter(3)
    conv.step(**step_args(terminated=np.array([False, True, False])))
    assert conv.autoreset_mode == "NextStep"
    return conv


def test_next_step_skips_only_the_reset_step() -> None:
    conv = ended_next_step()
    np.testing.assert_array_equal(conv.reset_pending, [False, True, False])
    rows = conv.step(**step_args())
    assert rows.streams.tolist() == [0, 2]
    assert conv.step(**step_args()).streams.tolist() == [0, 1, 2]


def test_reset_after_manual_envs_reset_keeps_the_next_step() -> None:
    conv = ended_next_step()
    conv.reset(np.array([False, True, False]))
    assert conv.step(**step_args()).streams.tolist() == [0, 1, 2]
    conv = ended_next_step()
    conv.reset()
    assert not conv.reset_pending.any()


def test_same_step_stores_the_final_obs() -> None:
    conv = VectorStepConverter(3)
    done = np.array([False, True, False])
    rows = conv.step(**step_args(truncated=done, infos=same_step_infos(done)))
    assert conv.autoreset_mode == "SameStep"
    assert rows.streams.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(rows.next_obs, [[1, 1], [7, 7], [1, 1]])
    np.testing.assert_array_equal(rows.discount, [GAMMA, GAMMA, GAMMA])  # truncated: bootstrap
    np.testing.assert_array_equal(rows.episode_end, done)
    assert conv.step(**step_args()).streams.tolist() == [0, 1, 2]


@pytest.mark.parametrize("configured", [None, "NextStep", "Disabled"])
def test_final_obs_contradicting_next_step_raises(configured: str | None) -> None:
    conv = ended_next_step() if configured is None else VectorStepConverter(3, autoreset_mode=configured)
    if configured is None:
        conv.step(**step_args())  # the reset step
    before = conv.state_dict()
    done = np.array([True, False, False])
    with pytest.raises(ValueError, match=r"final_obs.*same-step.*does not match"):
        conv.step(**step_args(terminated=done, infos=same_step_infos(done)))
    assert states_equal(conv.state_dict(), before)


@pytest.mark.parametrize("configured", [None, AutoresetMode.SAME_STEP])
def test_missing_final_obs_contradicting_same_step_raises(configured: Any) -> None:
    conv = VectorStepConverter(3, autoreset_mode=configured)
    if configured is None:
        done = np.array([False, True, False])
        conv.step(**step_args(terminated=done, infos=same_step_infos(done)))
    before = conv.state_dict()
    with pytest.raises(ValueError, match=r"lacks 'final_obs'.*next-step.*same-step"):
        conv.step(**step_args(terminated=np.array([True, False, False])))
    assert states_equal(conv.state_dict(), before)


def test_end_at_a_reset_step_raises() -> None:
    """A next-step reset step never ends an episode: if it does, the env resets some other way."""
    conv = ended_next_step()
    before = conv.state_dict()
    with pytest.raises(ValueError, match=r"env 1 .* not in next-step mode"):
        conv.step(**step_args(truncated=np.array([False, True, False])))
    assert states_equal(conv.state_dict(), before)


def test_same_step_env_fed_to_a_next_step_converter_raises() -> None:
    envs = make_envs(AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="does not match"):
        run(envs, VectorStepConverter(NUM_ENVS, autoreset_mode="NextStep"), 100)


BAD_STEPS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("obs rows", {"obs": np.zeros((2, 2))}, ValueError, "obs should have a leading axis"),
    ("obs object", {"obs": np.array([None] * 3)}, TypeError, "obs should be an array"),
    ("next_obs shape", {"next_obs": np.zeros((3, 3))}, ValueError, "next_obs should have shape"),
    ("next_obs dict", {"next_obs": {"a": np.zeros((3, 2))}}, ValueError, "next_obs should have the struct"),
    ("action rows", {"action": np.zeros(4)}, ValueError, "action should have a leading axis"),
    ("action scalar", {"action": 1}, ValueError, "action should have a leading axis"),
    ("reward shape", {"reward": np.ones((3, 1))}, ValueError, "reward should have shape"),
    ("reward nan", {"reward": np.array([0.0, np.nan, 0.0])}, ValueError, r"finite.*reward\[1\]"),
    ("reward inf", {"reward": np.array([0.0, 0.0, -np.inf])}, ValueError, "reward should be finite"),
    ("reward str", {"reward": np.array(["a", "b", "c"])}, TypeError, "reward should hold real numbers"),
    ("terminated int", {"terminated": np.zeros(3, int)}, TypeError, "terminated should be a bool array"),
    ("terminated shape", {"terminated": np.zeros(2, bool)}, ValueError, "terminated should have shape"),
    ("truncated list", {"truncated": [0, 1, 0]}, TypeError, "truncated should be a bool array"),
    ("gamma high", {"gamma": 1.5}, ValueError, "gamma should lie in"),
    ("gamma low", {"gamma": -0.1}, ValueError, "gamma should lie in"),
    ("gamma nan", {"gamma": float("nan")}, ValueError, "gamma should lie in"),
    ("gamma str", {"gamma": "0.9"}, TypeError, "gamma should be a real number"),
    ("gamma bool", {"gamma": True}, TypeError, "gamma should be a real number"),
    ("infos", {"infos": None}, TypeError, "infos should be the dict"),
    (
        "final mask",
        {"infos": {"final_obs": np.full(3, None), "_final_obs": np.array([True, False, False])}},
        ValueError,
        r"infos\['_final_obs'\] should mark exactly",
    ),
]


@pytest.mark.parametrize(("what", "changes", "error", "message"), BAD_STEPS, ids=[b[0] for b in BAD_STEPS])
def test_bad_step_raises_and_changes_nothing(
    what: str, changes: dict[str, Any], error: type[Exception], message: str
) -> None:
    conv = ended_next_step()
    before = conv.state_dict()
    with pytest.raises(error, match=message):
        conv.step(**step_args(**changes))
    assert states_equal(conv.state_dict(), before)


@pytest.mark.parametrize(
    ("final", "message"),
    [
        (np.zeros(3, np.float32), r"infos\['final_obs'\]\[1\] should be an observation of shape \(2,\)"),
        ("x", r"infos\['final_obs'\]\[1\] should be an observation"),
    ],
)
def test_bad_final_obs_raises_and_changes_nothing(final: Any, message: str) -> None:
    conv = VectorStepConverter(3, autoreset_mode="SameStep")
    before = conv.state_dict()
    done = np.array([False, True, False])
    with pytest.raises(ValueError, match=message):
        conv.step(**step_args(terminated=done, infos=same_step_infos(done, final)))
    assert states_equal(conv.state_dict(), before)
    infos = same_step_infos(done)
    infos["final_obs"][1] = None
    with pytest.raises(ValueError, match="final observation of env 1"):
        conv.step(**step_args(terminated=done, infos=infos))
    assert states_equal(conv.state_dict(), before)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_envs": 0}, ValueError, "num_envs should be an integer >= 1"),
        ({"num_envs": 2.0}, TypeError, "num_envs should be an integer"),
        ({"num_envs": 2, "autoreset_mode": "next"}, ValueError, "autoreset_mode should be one of"),
        (
            {"num_envs": 2, "autoreset_mode": 3},
            TypeError,
            "autoreset_mode should be a gymnasium AutoresetMode",
        ),
    ],
)
def test_bad_construction(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        VectorStepConverter(**kwargs)


def test_bad_reset_mask_changes_nothing() -> None:
    conv = ended_next_step()
    before = conv.state_dict()
    with pytest.raises(TypeError, match="mask should be a bool array"):
        conv.reset(np.array([0, 1, 0]))
    with pytest.raises(ValueError, match="mask should have shape"):
        conv.reset(np.array([True]))
    assert states_equal(conv.state_dict(), before)


# -- checkpointing ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_state_round_trip_continues_exactly(mode: AutoresetMode) -> None:
    """Save mid-run (with resets pending), restore into a fresh detecting converter: same rows."""
    a, b = make_envs(mode), make_envs(mode)
    conv_a, conv_b = VectorStepConverter(NUM_ENVS), VectorStepConverter(NUM_ENVS)
    rng = np.random.default_rng(1)
    obs_a, _ = a.reset(seed=3)
    obs_b, _ = b.reset(seed=3)
    for t in range(80):
        action = rng.integers(0, 3, NUM_ENVS)
        step_a, step_b = a.step(action), b.step(action)
        rows_a = conv_a.step(obs_a, action, *step_a[1:4], step_a[0], step_a[4], gamma=GAMMA)
        if t == 40:
            state = conv_b.state_dict()
            conv_b = VectorStepConverter(NUM_ENVS)
            conv_b.load_state_dict(copy.deepcopy(state))
            assert states_equal(conv_b.state_dict(), state)
        rows_b = conv_b.step(obs_b, action, *step_b[1:4], step_b[0], step_b[4], gamma=GAMMA)
        assert flat_rows([rows_a]) == flat_rows([rows_b])
        obs_a, obs_b = step_a[0], step_b[0]
    assert states_equal(conv_a.state_dict(), conv_b.state_dict())


def test_state_of_another_configuration_is_refused() -> None:
    state = ended_next_step().state_dict()
    for other in (VectorStepConverter(4), VectorStepConverter(3, autoreset_mode="SameStep")):
        before = other.state_dict()
        with pytest.raises(ValueError, match="should be"):
            other.load_state_dict(state)
        assert states_equal(other.state_dict(), before)


def check_consistent(conv: VectorStepConverter) -> None:
    state = conv.state_dict()
    assert state["ended"].dtype == np.bool_ and state["ended"].shape == (conv.num_envs,)
    assert state["autoreset_mode"] in (None, "NextStep", "SameStep", "Disabled")
    assert not (state["ended"].any() and state["autoreset_mode"] is None)
    conv.step(**step_args(conv.num_envs))  # still usable


STATE = ended_next_step().state_dict()
FOREIGN = [VectorStepConverter(4).state_dict(), {**STATE, "autoreset_mode": "SameStep"}]


@settings(max_examples=150)
@given(corrupted=corrupted_states(STATE, FOREIGN))
def test_corrupted_state_is_refused_or_consistent(corrupted: tuple[str, Any]) -> None:
    _, state = corrupted
    check_load(ended_next_step(), state, check_consistent)
    check_load(VectorStepConverter(3, autoreset_mode="Disabled"), state, check_consistent)


def test_for_env_without_a_mode_detects_it() -> None:
    class Bare:
        num_envs = 3
        metadata: dict[str, Any] = {}  # noqa: RUF012

    conv = VectorStepConverter.for_env(Bare())  # type: ignore[arg-type]
    assert conv.num_envs == 3 and conv.autoreset_mode is None
    with pytest.raises(TypeError, match="num_envs should be an integer"):
        VectorStepConverter.for_env(object())  # type: ignore[arg-type]


def test_torch_tensors_and_lists_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    conv = VectorStepConverter(3)
    done = torch.tensor([False, True, False])
    rows = conv.step(
        torch.zeros(3, 2),
        [0, 1, 2],
        torch.ones(3, dtype=torch.float64),
        done,
        torch.zeros(3, dtype=torch.bool),
        torch.ones(3, 2),
        {},
        gamma=GAMMA,
    )
    assert rows.streams.tolist() == [0, 1, 2] and rows.discount.tolist() == [GAMMA, 0.0, GAMMA]
    assert conv.step(**step_args()).streams.tolist() == [0, 2]
