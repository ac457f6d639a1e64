"""The registered PER-vs-uniform comparison: its metrics, its protocol, its runs, its report,
and the sweep table that shows each arm's own hyper-parameters."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("yaml")
pytest.importorskip("tqdm")
pytest.importorskip("cloudpickle")
pytest.importorskip("matplotlib")

from recipes.common import rl_metrics
from recipes.common.provenance import record_start
from recipes.dqn import sweep_report as report
from recipes.dqn.config import load_config, run_dir
from recipes.dqn.stack_parts import check_stacked
from recipes.studies import per_vs_uniform


def test_auc_is_the_mean_over_evaluations_and_final_the_last() -> None:
    curve = [0.0, None, 10.0, 20.0, float("nan")]
    assert rl_metrics.auc(curve) == pytest.approx(10.0)
    assert rl_metrics.final(curve) == 20.0
    assert math.isnan(rl_metrics.auc([None])) and math.isnan(rl_metrics.final([]))


def test_welch_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for size_a, size_b, shift in ((10, 10, 0.3), (4, 7, 1.5), (5, 5, 0.0), (12, 3, -2.0)):
        a, b = rng.normal(size=size_a), rng.normal(shift, 2.0, size=size_b)
        t, p = rl_metrics.welch(a, b)
        expected = stats.ttest_ind(a, b, equal_var=False)
        assert t == pytest.approx(expected.statistic, rel=1e-9)
        assert p == pytest.approx(expected.pvalue, rel=1e-7, abs=1e-12)


def test_compare_gives_the_sign_of_a_clear_difference_and_none_for_noise() -> None:
    """Separated seeds: "better"/"worse" by the sign of IQM(arm) − IQM(baseline); the same
    distribution: "no difference detected" (the interval covers 0)."""
    rng = np.random.default_rng(1)
    low, high = rng.normal(100, 5, 10), rng.normal(200, 5, 10)
    assert rl_metrics.compare(high, low)["verdict"] == "better"
    result = rl_metrics.compare(low, high)
    assert result["verdict"] == "worse" and result["difference"][2] < 0 < result["welch_t"] * -1
    same = rl_metrics.compare(rng.normal(0, 1, 10), rng.normal(0, 1, 10))
    assert same["verdict"] == "no difference detected" and same["difference"][1] < 0 < same["difference"][2]
    point, lo, hi = rl_metrics.iqm_interval([1.0, 2.0, 3.0, 4.0, 100.0])
    assert lo <= point <= hi and point == pytest.approx(3.0)  # the IQM drops the outlier
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rl_metrics.compare([1.0], [1.0, 2.0])


def test_protocol_is_what_the_issue_registers() -> None:
    """CartPole: 5 arms × ≥ 10 seeds separating step size and sampling, each arm against the uniform
    arm of its own step size; MinAtar: ≥ 2 games × 3 arms × ≥ 4 seeds on Dopamine's config; SB3."""
    protocol = per_vs_uniform.load_protocol()
    cartpole = protocol["envs"]["CartPole-v1"]
    assert len(cartpole["arms"]) == 5 and len(cartpole["seeds"]) >= 10
    runs, names = per_vs_uniform.env_runs(
        protocol, "CartPole-v1", per_vs_uniform.RunConfig(envs=("CartPole-v1",), runs="unused")
    )
    seeds_of = {name: arm.get("seeds", cartpole["seeds"]) for name, arm in cartpole["arms"].items()}
    assert len(runs) == sum(len(s) for s in seeds_of.values())
    # amended: 20 seeds for the four key arms, proportional at η keeps its registered 10
    assert {n for n, s in seeds_of.items() if len(s) >= 20} == {
        "uniform",
        "uniform lr_divisor=4",
        "proportional",
        "rank",
    }
    assert seeds_of["proportional lr_divisor=1"] == list(range(10))
    assert names.count("rank") == 20 and names.count("proportional lr_divisor=1") == 10
    check_stacked(runs)  # amended: all 90 train as agents of one stacked process
    assert protocol["amended"][1].startswith("2026-11-28, before any run")
    assert protocol["amended"][2].startswith("2026-11-28, before any run of the amended MinAtar")
    assert protocol["amended"][3].startswith("2026-11-28, before any CartPole run of the amended")
    assert len(protocol["sb3"]["seeds"]) == 10 and protocol["sb3"]["equivalence_margin"] == 0.1
    assert all(spec["equivalence_margin"] == 0.1 for spec in protocol["envs"].values())
    step = {name: run.lr / run.lr_divisor for name, run in zip(names, runs, strict=True)}
    for name, arm in cartpole["arms"].items():
        if arm["baseline"] is not None:  # the baseline runs at the arm's own step size
            assert step[name] == step[arm["baseline"]]
            assert runs[names.index(arm["baseline"])].replay == "uniform"
    assert {step[n] for n in cartpole["arms"]} == {0.0023, 0.0023 / 4}
    # amended: >= 3 games, 4 arms at matched step sizes, >= 5 seeds, >= 1M steps (past ε's decay)
    minatar = [env for env in protocol["envs"] if env.startswith("MinAtar/")]
    assert len(minatar) >= 3
    for env in minatar:
        spec = protocol["envs"][env]
        assert spec["protocol"] == "dopamine_minatar" and len(spec["arms"]) == 4 and len(spec["seeds"]) >= 5
        assert spec["total_steps"] >= 1_000_000
        runs, names = per_vs_uniform.env_runs(
            protocol, env, per_vs_uniform.RunConfig(envs=(env,), runs="unused")
        )
        assert {r.eval_epsilon for r in runs} == {0.001} and {r.total_steps for r in runs} == {
            spec["total_steps"]
        }
        step = {name: run.lr / run.lr_divisor for name, run in zip(names, runs, strict=True)}
        for name, arm in spec["arms"].items():
            if arm["baseline"] is not None:  # every prioritized arm against uniform at its own step size
                assert step[name] == step[arm["baseline"]]
                assert runs[names.index(arm["baseline"])].replay == "uniform"
        assert len(set(step.values())) == 2  # η and η/4
    assert protocol["sb3"]["baseline"] in protocol["sb3"]["arms"]


def _curves(scores: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Sweep curves (``report.collect``'s form) from per-arm per-seed evaluation scores."""
    curves = {}
    for arm, per_seed in scores.items():
        evaluations = len(per_seed[0])
        curves[arm] = {
            "steps": [1000 * (e + 1) for e in range(evaluations)],
            "returns": [[seed[e] for seed in per_seed] for e in range(evaluations)],
            "seeds": list(range(len(per_seed))),
            "weight_mean": [[0.5 if arm != "uniform" else 1.0 for _ in per_seed]],
        }
    return curves


def test_report_gathers_registered_metrics_and_verdicts(tmp_path: Path) -> None:
    """The results JSON has the registered shape: per seed auc / final / weight_mean_last, per arm
    the AUC IQM interval, per arm its comparison with its baseline, one verdict per environment."""
    rng = np.random.default_rng(2)
    scores = {
        "uniform": [list(rng.normal(100, 3, 4)) for _ in range(10)],
        "uniform lr_divisor=4": [list(rng.normal(100, 3, 4)) for _ in range(10)],
        "proportional lr_divisor=1": [list(rng.normal(300, 3, 4)) for _ in range(10)],
        "proportional": [list(rng.normal(100, 3, 4)) for _ in range(10)],
        "rank": [list(rng.normal(20, 3, 4)) for _ in range(10)],
    }
    (tmp_path / "CartPole-v1.json").write_text(json.dumps(_curves(scores)))
    sb3 = {
        "arms": {
            "uniform": {"seeds": [0, 1], "auc": [1.0, 2.0], "final": [1.0, 3.0], "weight_mean_last": [1, 1]}
        }
    }
    (tmp_path / "sb3.json").write_text(json.dumps(sb3))
    # one run's record of where its code came from; the other 89 have none
    cfgs, names = per_vs_uniform.env_runs(
        per_vs_uniform.load_protocol(),
        "CartPole-v1",
        per_vs_uniform.RunConfig(("CartPole-v1",), runs=str(tmp_path)),
    )
    record_start(run_dir(cfgs[names.index("rank")]), {"commit": "ab" * 20, "clean": True})
    out = tmp_path / "out" / "per_vs_uniform"
    results = per_vs_uniform.main(
        ["report", "--runs", str(tmp_path), "--sb3", str(tmp_path / "sb3.json"), "--out", str(out)]
    )
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["protocol"] == per_vs_uniform.load_protocol()
    arm = written["envs"]["CartPole-v1"]["proportional"]
    assert len(arm["auc"]) == len(arm["final"]) == len(arm["weight_mean_last"]) == 10
    assert arm["auc"][0] == pytest.approx(float(np.mean(scores["proportional"][0])))
    assert arm["weight_mean_last"] == [0.5] * 10
    assert set(written["aggregates"]["CartPole-v1"]["rank"]) == {"auc_iqm", "final_iqm"}
    comparisons = written["comparisons"]["CartPole-v1"]
    assert set(comparisons) == {"proportional lr_divisor=1", "proportional", "rank"}
    assert comparisons["proportional lr_divisor=1"]["verdict"] == "better"
    assert comparisons["rank"]["verdict"] == "worse"  # against uniform at η/4, its registered baseline
    assert "rank vs uniform lr_divisor=4: worse" in written["verdict"]["CartPole-v1"]
    assert written["envs"][per_vs_uniform.SB3_ENV]["uniform"]["auc"] == [1.0, 2.0]
    assert results["verdict"] == written["verdict"]
    assert out.with_suffix(".png").exists() and "Verdict:" in out.with_suffix(".md").read_text()
    # the equivalence test within ±10 % of the baseline's AUC IQM, and Holm over the family
    base_auc = written["envs"]["CartPole-v1"]["uniform lr_divisor=4"]["auc"]
    margin = 0.1 * written["aggregates"]["CartPole-v1"]["uniform lr_divisor=4"]["auc_iqm"][0]
    assert margin == pytest.approx(rl_metrics.relative_margin(base_auc, 0.1))
    same = comparisons["proportional"]["equivalence"]
    assert same["margin"] == pytest.approx(margin) and same["verdict"] == "equivalent within ±m"
    assert comparisons["proportional"]["verdict"] == "no difference detected"
    assert comparisons["rank"]["equivalence"]["verdict"] == "not shown equivalent"
    assert "proportional vs uniform lr_divisor=4: no difference detected" in written["verdict"]["CartPole-v1"]
    assert f"equivalent within ±{margin:.3g}" in written["verdict"]["CartPole-v1"]
    p = {arm: c["welch_p"] for arm, c in comparisons.items()}
    expected = rl_metrics.holm(p)
    assert (
        written["holm"]["tests"] == 3
        and written["holm"]["adjusted_p"]["CartPole-v1"] == expected["adjusted_p"]
    )
    assert written["holm"]["survives"]["CartPole-v1"] == expected["survives"]
    assert written["holm"]["survives"]["CartPole-v1"]["rank"] is True
    assert written["sources"]["CartPole-v1"] == {
        "runs": 90,
        "commits": {"ab" * 20: 1},
        "all_clean": True,
        "unrecorded": 89,
    }
    assert written["sources"][per_vs_uniform.SB3_ENV]["commits"] == {}  # its JSON records none
    table = out.with_suffix(".md").read_text()
    assert "Holm-adjusted p" in table and "equivalent within ±" in table and "not shown equivalent" in table
    assert "Code: `ababababab` (1 runs); every start from a clean tree; 89 runs without a record." in table
    # the registered environments without records are named, and the family is said to lack them
    minatar = [env for env in written["protocol"]["envs"] if env.startswith("MinAtar/")]
    assert written["not_reported"] == minatar and len(minatar) == 3
    assert f"Not in this report: {', '.join(minatar)}" in table
    assert "The Holm family below is this report's 3 comparisons; theirs join it" in table


def test_an_arms_own_seeds_must_be_its_environments() -> None:
    protocol = per_vs_uniform.load_protocol()
    protocol["envs"]["CartPole-v1"]["arms"]["rank"]["seeds"] = [0, 99]
    config = per_vs_uniform.RunConfig(envs=("CartPole-v1",), runs="unused")
    with pytest.raises(ValueError, match="arm 'rank' seeds \\[99\\]"):
        per_vs_uniform.env_runs(protocol, "CartPole-v1", config)
    protocol["envs"]["CartPole-v1"]["arms"]["rank"]["seeds"] = [1, 3]
    _, names = per_vs_uniform.env_runs(protocol, "CartPole-v1", config)
    assert names.count("rank") == 2 and names.count("uniform") == 20


def test_no_arguments_print_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        per_vs_uniform.main([])
    assert exit_info.value.code == 0 and "usage:" in capsys.readouterr().out


def test_sweep_table_shows_each_arms_own_values() -> None:
    """Bug: the hyper-parameter table showed the first arm's values for every arm (lr_divisor 1.0,
    replay uniform), though the prioritized arms ran at η/4."""
    results = []
    for arm, seed in (("uniform", 0), ("proportional", 0), ("proportional", 1)):
        cfg = load_config("CartPole-v1", arm, seed=seed, total_steps=2000)
        results.append(
            {
                "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                "label": arm,
                "eval_steps": [1000, 2000],
                "eval_scores": [10.0, 20.0 + seed],
                "best_score": 20.0,
                "steps": 2000,
                "steps_per_s": 100.0,
                "wall_s": 20.0,
                "stopped": "done",
            }
        )
    curves = report.collect(results)
    text = report.markdown(load_config("CartPole-v1", "uniform"), 1, "cmd", results, curves, 1.0, "stem")
    differing = text.split("Each arm's own values")[1].split("Every arm's values")[0]
    assert "| lr_divisor | `1.0` | `4.0` |" in differing
    assert "| replay | `uniform` | `proportional` |" in differing
    shared = text.split("Every arm's values")[1]
    assert "| lr_divisor |" not in shared and "| gamma | `0.99` |" in shared
    assert "AUC, IQM" in text and "15.0 [15.0, 15.0]" in text  # uniform's AUC: mean of 10 and 20


def test_curve_stats_say_nan_where_no_seed_reached_a_point_without_a_warning() -> None:
    """Bug: ``make test`` printed numpy's "Mean of empty slice" from ``curve_stats`` (and
    ``np.nanmean`` in the SB3 plot) for an evaluation point that no seed reached."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, low, high, count = report.curve_stats([[1.0, None], [None, None], [2.0, 4.0]])
        seed_mean, seed_std = rl_metrics.seed_mean_std([[1.0, math.nan], [3.0, math.nan]])
    np.testing.assert_array_equal(count, [1, 0, 2])
    np.testing.assert_array_equal(mean, [1.0, math.nan, 3.0])
    np.testing.assert_array_equal(low, [1.0, math.nan, 2.0])
    np.testing.assert_array_equal(high, [1.0, math.nan, 4.0])
    np.testing.assert_array_equal(seed_mean, [2.0, math.nan])
    np.testing.assert_array_equal(seed_std, [1.0, math.nan])


def test_a_plot_with_no_curve_has_no_legend_and_no_warning(tmp_path: Path) -> None:
    """Bug: the weights plot of a sweep of arms without weights (uniform) called ``ax.legend()``
    with nothing labelled: matplotlib's "No artists with labels found to put in legend"."""
    import warnings

    curves = {"uniform": {"seeds": [0], "steps": [100], "returns": [[1.0]]}}  # no "log_steps"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = report.plot(curves, tmp_path / "weights.png", "no weights", metric="weight_mean")
        report.plot(curves, tmp_path / "returns.png", "returns")
    assert path.stat().st_size > 0


def test_plot_labels_each_arm_on_its_own_lines_and_wraps_panels_into_rows(tmp_path: Path) -> None:
    """Arm names break at ``_`` and the step size goes below them, so that neighbouring tick labels
    do not run into each other; five environments take two rows of three panels."""
    assert per_vs_uniform.tick_label("proportional_dopamine") == "proportional\ndopamine"
    assert per_vs_uniform.tick_label("uniform lr_divisor=4") == "uniform\nη/4"
    assert per_vs_uniform.tick_label("proportional lr_divisor=1") == "proportional\nη"
    arm = {"seeds": [0, 1], "auc": [1.0, 2.0]}
    envs = {f"env{i}": {"uniform": arm, "proportional_dopamine": arm} for i in range(5)}
    aggregates = {env: {a: {"auc_iqm": [1.5, 1.0, 2.0]} for a in arms} for env, arms in envs.items()}
    png = per_vs_uniform.plot({"envs": envs, "aggregates": aggregates}, tmp_path / "auc.png")
    height, width = pyplot_image_shape(png)
    per_row = per_vs_uniform.PANELS_PER_ROW
    assert width / height == pytest.approx((4.4 * per_row) / (3.9 * 2), rel=0.02)


def pyplot_image_shape(path: Path) -> tuple[int, int]:
    import matplotlib.image

    image = matplotlib.image.imread(path)
    return int(image.shape[0]), int(image.shape[1])


def test_report_shows_small_scores_to_three_significant_digits() -> None:
    """CartPole's hundreds keep one decimal; Breakout's single-digit AUCs get two, so that a
    difference of 0.30 is not printed as 0.3 next to IQMs that all read 3.9."""
    from recipes.studies.per_vs_uniform import decimals, verdict_sentence

    def aggregates(point: float) -> dict[str, dict[str, list[float]]]:
        return {"uniform": {"auc_iqm": [point, point - 1, point + 1]}}

    assert decimals(aggregates(244.4)) == 1
    assert decimals(aggregates(12.3)) == 1
    assert decimals(aggregates(3.78)) == 2
    assert decimals(aggregates(0.45)) == 3
    comparison = {"p": {"verdict": "no difference detected", "difference": [0.304, -0.181, 0.912]}}
    sentence = verdict_sentence(comparison, {"p": "u"}, decimals(aggregates(3.78)))
    assert "+0.30, 95% CI -0.18 to +0.91" in sentence
