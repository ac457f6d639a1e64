"""The imbalanced-MNIST recipe on small IDX files generated here (no network): data loading, the
imbalance, the informed weighting, a fast_dev_run of every arm and the comparison's outputs."""

from __future__ import annotations

import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("torchvision")
pytest.importorskip("jsonargparse")

from recipes.imbalanced_mnist import data as mnist_data
from recipes.imbalanced_mnist import experiment as rec

PER_CLASS_TRAIN, PER_CLASS_TEST = 60, 8

warnings.filterwarnings("ignore", ".*does not have many workers.*")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def make_idx_dir(directory: Path, gz: bool = True, seed: int = 0) -> Path:
    """MNIST-format files: 28×28 uint8 images whose brightest row says the class."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, per_class in (("train", PER_CLASS_TRAIN), ("t10k", PER_CLASS_TEST)):
        labels = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), per_class))
        images = rng.integers(0, 60, size=(labels.shape[0], 28, 28), dtype=np.uint8)
        images[np.arange(labels.shape[0]), 2 + 2 * labels] = 250
        suffix = ".gz" if gz else ""
        mnist_data.write_idx(directory / f"{split}-images-idx3-ubyte{suffix}", images)
        mnist_data.write_idx(directory / f"{split}-labels-idx1-ubyte{suffix}", labels)
    return directory


@pytest.fixture(autouse=True)
def _command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe's command line, not pytest's: LightningCLI given ``args`` warns when ``sys.argv``
    holds other arguments too."""
    monkeypatch.setattr("sys.argv", ["python -m recipes.imbalanced_mnist"])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("data")
    make_idx_dir(base / "MNIST" / "raw")
    return base


@pytest.mark.parametrize("gz", [True, False])
def test_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.idx.gz" if gz else "a.idx")
    mnist_data.write_idx(path, array)
    out = mnist_data.read_idx(path)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, array)
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        mnist_data.read_idx(bad)


def test_locate_dataset_prefers_mnist_then_fashion(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert mnist_data.locate_dataset(root, "auto", download=False) == ("mnist", root / "MNIST" / "raw")
    fashion = make_idx_dir(tmp_path / "FashionMNIST" / "raw", gz=False)
    assert mnist_data.locate_dataset(tmp_path, "auto", download=False) == ("fashion-mnist", fashion)
    monkeypatch.setattr(mnist_data, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        mnist_data.locate_dataset(tmp_path / "empty", "auto", download=False)
    with pytest.raises(FileNotFoundError, match="MNIST"):
        mnist_data.locate_dataset(tmp_path, "mnist", download=False)
    with pytest.raises(ValueError, match="dataset"):
        mnist_data.locate_dataset(tmp_path, "cifar", download=False)  # type: ignore[arg-type]


def test_a_failed_download_is_said_once_and_not_retried_for_an_hour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: ``make demo`` said "MNIST could not be downloaded" twice (``prepare``, then ``compare``
    in another process, each asking the network again)."""
    import urllib.error
    import urllib.request

    asked = []

    def offline(*args: object, **kwargs: object) -> None:
        asked.append(args)
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    fashion = make_idx_dir(tmp_path / "fashion-mnist", gz=False)
    for _ in range(3):  # three commands of a demo
        assert mnist_data.locate_dataset(tmp_path, "auto") == ("fashion-mnist", fashion)
    assert len(asked) == 1 and capsys.readouterr().err.count("MNIST could not be downloaded") == 1
    with pytest.raises(FileNotFoundError, match="MNIST"):
        mnist_data.locate_dataset(tmp_path, "mnist")  # asked for MNIST itself: the network is asked
    assert len(asked) == 2
    monkeypatch.setattr(mnist_data, "DOWNLOAD_RETRY_S", 0.0)
    assert mnist_data.locate_dataset(tmp_path, "auto")[0] == "fashion-mnist" and len(asked) == 3


def test_imbalanced_split_counts() -> None:
    counts = np.array([5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])  # MNIST's train set
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), counts))
    train, val = rec.imbalanced_split(
        labels, rare_classes=(0, 1, 2, 3, 4), keep_fraction=0.01, val_per_class=100, seed=0
    )
    kept = np.bincount(labels[train], minlength=10)
    np.testing.assert_array_equal(kept[:5], np.round(0.01 * counts[:5]))  # 59, 67, 60, 61, 58
    np.testing.assert_array_equal(kept[5:], counts[5:] - 100)
    np.testing.assert_array_equal(np.bincount(labels[val], minlength=10), np.full(10, 100))  # balanced
    assert np.intersect1d(train, val).size == 0
    again, _ = rec.imbalanced_split(
        labels, rare_classes=(0, 1, 2, 3, 4), keep_fraction=0.01, val_per_class=100, seed=0
    )
    other, _ = rec.imbalanced_split(
        labels, rare_classes=(0, 1, 2, 3, 4), keep_fraction=0.01, val_per_class=100, seed=1
    )
    np.testing.assert_array_equal(train, again)
    assert not np.array_equal(train, other)
    with pytest.raises(ValueError, match="keep_fraction"):
        rec.imbalanced_split(labels, rare_classes=(0,), keep_fraction=0.0, val_per_class=1, seed=0)


def test_informed_weighting_scales_the_rare_classes_loss() -> None:
    torch.manual_seed(0)
    informed = rec.ImbalancedClassifier(informed_weight=100.0)
    plain = rec.ImbalancedClassifier(informed_weight=1.0)
    plain.load_state_dict(informed.state_dict(), strict=False)
    plain.class_weights.fill_(1.0)
    x, y = torch.randn(6, 1, 28, 28), torch.tensor([0, 4, 5, 9, 2, 7])
    loss, per_sample = informed.objective(x, y)
    plain_loss, plain_per_sample = plain.objective(x, y)
    torch.testing.assert_close(per_sample, plain_per_sample)  # the priorities are unweighted losses
    factor = torch.tensor([100.0, 100.0, 1.0, 1.0, 100.0, 1.0])
    torch.testing.assert_close(loss, (factor * per_sample).mean())
    torch.testing.assert_close(plain_loss, per_sample.mean())
    w = torch.tensor([0.5, 1.0, 1.0, 0.25, 1.0, 1.0])
    torch.testing.assert_close(informed.objective(x, y, w)[0], (factor * w * per_sample).mean())


def _args(root: Path) -> list[str]:
    return [
        "--data.root",
        str(root),
        "--data.dataset",
        "mnist",
        "--data.download",
        "false",
        "--data.keep_fraction",
        "0.1",
        "--data.val_per_class",
        "5",
        "--data.eval_batch_size",
        "100",
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--trainer.enable_checkpointing",
        "false",
    ]


@pytest.mark.parametrize("arm", rec.ARMS)
def test_fast_dev_run_of_each_arm(root: Path, arm: str) -> None:
    config = str(rec.CONFIG_DIR / f"{arm}.yaml")
    cli = rec.cli_main(["fit", "--config", config, "--trainer.fast_dev_run", "3", *_args(root)])
    model, data = cli.model, cli.datamodule
    assert isinstance(model, rec.ImbalancedClassifier) and isinstance(data, rec.ImbalancedMNISTDataModule)
    assert data.dataset_name == "MNIST"
    np.testing.assert_array_equal(data.class_counts, [6] * 5 + [PER_CLASS_TRAIN - 5] * 5)
    assert model.global_step == 3 and model.history
    assert model.hparams.informed_weight == (100.0 if arm == "informed" else 1.0)
    assert 0 <= model.history[-1]["test/errors"] <= 10 * PER_CLASS_TEST
    callbacks = [c for c in cli.trainer.callbacks if isinstance(c, rec.PrioritizedSamplingCallback)]
    if arm == "prioritized":
        assert len(callbacks) == 1 and data.prioritized_sampler is not None
        priorities = data.prioritized_sampler.sampler.priorities
        assert np.sum(priorities != 1.0) > 0  # the drawn examples' losses arrived
    else:
        assert not callbacks and data.prioritized_sampler is None


def test_fit_without_a_config_is_the_prioritized_arm(root: Path) -> None:
    """Bug: ``fit`` without ``--config`` drew uniform minibatches, so ``fit
    --trainer.fast_dev_run=true`` never touched prisample.  Its defaults are the prioritized arm's."""
    cli = rec.cli_main(["fit", "--trainer.fast_dev_run", "2", *_args(root)])
    data = cli.datamodule
    assert isinstance(data, rec.ImbalancedMNISTDataModule) and data.sampler == "prioritized"
    assert data.prioritized_sampler is not None
    assert np.sum(data.prioritized_sampler.sampler.priorities != 1.0) > 0  # losses became priorities
    assert any(isinstance(c, rec.PrioritizedSamplingCallback) for c in cli.trainer.callbacks)


def _settings(config: Any) -> dict[str, Any]:
    """A parsed LightningCLI config's model, data and trainer values as plain data."""
    return json.loads(json.dumps(config.as_dict(), default=str))  # type: ignore[no-any-return]


@pytest.mark.parametrize("arm", [None, *rec.ARMS])
def test_each_arm_gets_exactly_its_file_and_no_config_the_prioritized_file(
    arm: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an arm's file says, and the class defaults for everything else: the defaults being the
    prioritized arm's leaks nothing into the others (the uniform arm stays uniform); without a
    file, ``fit`` gets exactly the prioritized arm's settings (the comparison's prioritized runs
    and a bare ``fit`` are the same run)."""
    import inspect

    import yaml

    monkeypatch.chdir(tmp_path)
    read = _settings(
        rec.cli_main(
            [] if arm is None else ["--config", str(rec.CONFIG_DIR / f"{arm}.yaml")], run=False
        ).config
    )
    arm_file = yaml.safe_load((rec.CONFIG_DIR / f"{arm or 'prioritized'}.yaml").read_text())
    for section, cls in (("model", rec.ImbalancedClassifier), ("data", rec.ImbalancedMNISTDataModule)):
        defaults = {
            name: list(p.default) if isinstance(p.default, tuple) else p.default
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"
        }
        assert read[section] == {**defaults, **arm_file[section]}, section
    for key, value in arm_file["trainer"].items():
        expected = (
            value
            if key != "logger"
            else {**value, "init_args": {**read["trainer"]["logger"]["init_args"], **value["init_args"]}}
        )
        assert read["trainer"][key] == expected, key
    assert read["data"]["sampler"] == ("uniform" if arm in ("uniform", "informed") else "prioritized")


def test_command_line_sets_alpha_beta_backend(root: Path) -> None:
    config = str(rec.CONFIG_DIR / "prioritized.yaml")
    cli = rec.cli_main(
        [
            "fit",
            "--config",
            config,
            "--trainer.fast_dev_run",
            "2",
            *_args(root),
            "--data.alpha",
            "0.6",
            "--data.beta",
            "0.4",
            "--data.beta_end",
            "1.0",
            "--data.backend",
            "rank",
        ]
    )
    data = cli.datamodule
    assert isinstance(data, rec.ImbalancedMNISTDataModule) and data.prioritized_sampler is not None
    base = data.prioritized_sampler.sampler
    assert (base.alpha, base.backend_name) == (0.6, "rank")
    callback = next(c for c in cli.trainer.callbacks if isinstance(c, rec.PrioritizedSamplingCallback))
    assert callback.beta_start == 0.4 and callback.beta_end == 1.0


def test_compare_writes_json_plots_and_table(root: Path, tmp_path: Path) -> None:
    config = rec.CompareConfig(
        seeds=2,
        max_steps=4,
        eval_every=2,
        root=str(root),
        dataset="mnist",
        workers=1,
        overrides=("--data.keep_fraction", "0.1", "--data.val_per_class", "5"),
        out_dir=str(tmp_path),
        name="tiny",
    )
    rec.compare_main(config)
    results = json.loads((tmp_path / "tiny.json").read_text())
    assert results["dataset"] == "MNIST"
    assert set(results["arms"]) == {"uniform", "informed", "prioritized"}
    for arm in results["arms"].values():
        assert arm["updates"] == [2, 4]
        assert np.asarray(arm["test_errors"]).shape == (2, 2)  # [point][seed]
        assert np.asarray(arm["test_loss"]).shape == (2, 2)
    table = (tmp_path / "tiny.md").read_text()
    assert "MNIST" in table and "| prioritized |" in table
    assert (tmp_path / "tiny_test_errors.png").stat().st_size > 0
    assert (tmp_path / "tiny_test_loss.png").stat().st_size > 0


def test_comparison_is_identical_in_fresh_processes_whatever_the_thread_count(
    root: Path, tmp_path: Path
) -> None:
    """Bug: ``make demo`` reran the committed comparison with other numbers (uniform's median 4,721
    errors against 4,184).  Each run took its torch thread count from ``OMP_NUM_THREADS`` (the
    comparison's own ``set_num_threads(1)`` was overridden), and the sums of a convolution, so the
    uniform arm at lr 0.3, depend on it.  Two fresh processes with 1 and 2 threads must write the
    same JSON, timings aside."""
    import os
    import subprocess
    import sys

    written = []
    for threads in ("1", "2"):
        command = [
            sys.executable,
            "-m",
            "recipes.imbalanced_mnist",
            "compare",
            "--arms",
            "uniform,prioritized",
            "--seeds",
            "2",
            "--max_steps",
            "4",
            "--eval_every",
            "2",
            "--root",
            str(root),
            "--dataset",
            "mnist",
            "--workers",
            "1",
            "--out_dir",
            str(tmp_path),
            "--overrides=--data.keep_fraction,0.1,--data.val_per_class,5",
        ]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "PYTHONHASHSEED": threads,
        }
        done = subprocess.run(
            command,
            cwd=Path(__file__).resolve().parent.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        text = (tmp_path / "imbalanced_mnist.json").read_text()
        assert json.loads(text)["torch_threads"] == 1
        written.append(re.sub(r'\n *"runtime_s": [0-9.]+,?', "", text))
    assert written[0] == written[1]
