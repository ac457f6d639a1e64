"""The data of the imbalanced-MNIST recipe: MNIST's IDX files (found, downloaded, or Fashion-MNIST
instead) and the class-imbalanced split of App. B.3.

MNIST is read from ``root`` (IDX files, as torchvision stores them) and downloaded there when the
network allows.  Where it cannot be downloaded, Fashion-MNIST from Debian's ``dataset-fashion-mnist``
package (``/usr/share/datasets/fashion-mnist``), a drop-in 28×28 ten-class set, is used instead.

``python -m recipes.imbalanced_mnist prepare --root data`` makes the data available and exits non-zero when
neither is (``recipes/imbalanced_mnist/ensure_data.sh``, which ``make demo`` runs, then says that it installs
the Debian package, and does; ``PRISAMPLE_NO_APT=1`` stops it).
"""

from __future__ import annotations

import gzip
import math
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Dataset = Literal["auto", "mnist", "fashion-mnist"]
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
DATASET_NAMES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST"}
IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_DTYPES: dict[int, npt.DTypeLike] = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | Path) -> npt.NDArray[Any]:
    """An IDX file (LeCun et al.'s MNIST format), plain or gzip-compressed, as a numpy array."""
    path = Path(path)
    with gzip.open(path) if path.suffix == ".gz" else path.open("rb") as handle:
        data = handle.read()
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (magic bytes {data[:4]!r})")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    array = np.frombuffer(data, dtype=_IDX_DTYPES[code], offset=4 + 4 * ndim)
    if array.size != math.prod(shape):
        raise ValueError(f"{path} holds {array.size} values for the shape {shape}")
    return array.reshape(shape).astype(array.dtype.newbyteorder("="))


def write_idx(path: str | Path, array: npt.NDArray[np.uint8]) -> None:
    """Write a uint8 array as an IDX file (gzip-compressed when ``path`` ends in ``.gz``)."""
    path = Path(path)
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    with gzip.open(path, "wb") if path.suffix == ".gz" else path.open("wb") as handle:
        handle.write(payload)


def _idx_dir(candidates: Sequence[Path]) -> Path | None:
    """The first directory holding all four IDX files (plain or ``.gz``)."""
    for directory in candidates:
        if all(
            (directory / name).exists() or (directory / f"{name}.gz").exists() for name in IDX_FILES.values()
        ):
            return directory
    return None


def _mnist_dirs(root: Path) -> list[Path]:
    return [root / "MNIST" / "raw", root / "mnist", root]


def _fashion_dirs(root: Path) -> list[Path]:
    return [root / "FashionMNIST" / "raw", root / "fashion-mnist", FASHION_MNIST_SYSTEM_DIR]


DOWNLOAD_RETRY_S = 3600.0
"""After a failed download, ``"auto"`` tries again only this many seconds later (or ``"mnist"`` now)."""


def _failure_mark(root: Path) -> Path:
    """The file a failed download leaves in ``root``: later commands fall back without a new attempt."""
    return root / ".mnist_download_failed"


def _failed_recently(root: Path) -> bool:
    mark = _failure_mark(root)
    return mark.exists() and time.time() - mark.stat().st_mtime < DOWNLOAD_RETRY_S


def download_mnist(root: str | Path, timeout: float = 20.0) -> Path | None:
    """Download MNIST with torchvision into ``root/MNIST/raw``; ``None`` when the network refuses.

    A failure is said once, on stderr, and marked in ``root`` (:func:`locate_dataset` then falls
    back to Fashion-MNIST without asking the network again for an hour: ``make demo`` prepares the
    data, then runs the comparison, each in its own process)."""
    import urllib.request

    from torchvision.datasets import MNIST  # type: ignore[import-untyped]

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        # One probe first: offline, each of torchvision's mirror × file attempts would wait in turn.
        urllib.request.urlopen(f"{MNIST.mirrors[0]}{MNIST.resources[0][0]}", timeout=timeout).close()
        for train in (True, False):
            MNIST(str(root), train=train, download=True)
    except Exception as error:  # no network, a proxy, a mirror down: all mean "not available"
        print(f"MNIST could not be downloaded ({type(error).__name__}: {error})", file=sys.stderr)
        mark = _failure_mark(Path(root))
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(f"{type(error).__name__}: {error}\n")
        return None
    finally:
        socket.setdefaulttimeout(previous)
    return _idx_dir(_mnist_dirs(Path(root)))


def locate_dataset(root: str | Path, dataset: Dataset = "auto", download: bool = True) -> tuple[str, Path]:
    """``(name, directory)`` of the IDX files to use.

    ``"auto"``: MNIST under ``root``, else MNIST downloaded into ``root``, else Fashion-MNIST (under
    ``root`` or Debian's ``/usr/share/datasets/fashion-mnist``); where a download failed in the
    last hour (:data:`DOWNLOAD_RETRY_S`) and Fashion-MNIST is there, without a new attempt.
    """
    if dataset not in ("auto", "mnist", "fashion-mnist"):
        raise ValueError(f"dataset should be 'auto', 'mnist' or 'fashion-mnist', but got dataset={dataset!r}")
    root = Path(root)
    if dataset in ("auto", "mnist"):
        found = _idx_dir(_mnist_dirs(root))
        fallback = dataset == "auto" and _failed_recently(root) and _idx_dir(_fashion_dirs(root)) is not None
        if found is None and download and not fallback:
            found = download_mnist(root)
        if found is not None:
            return "mnist", found
        if dataset == "mnist":
            raise FileNotFoundError(f"MNIST IDX files not found under {root} and not downloadable")
    found = _idx_dir(_fashion_dirs(root))
    if found is None:
        raise FileNotFoundError(
            f"neither MNIST (under {root} or by download) nor Fashion-MNIST is available: put MNIST's IDX "
            f"files under {root / 'MNIST' / 'raw'} (or pass --data.root with them), or install Debian's "
            "dataset-fashion-mnist package (recipes/imbalanced_mnist/ensure_data.sh does, for make demo)"
        )
    return "fashion-mnist", found


def load_idx_dir(directory: Path) -> dict[str, npt.NDArray[Any]]:
    """The four arrays (``train_images`` …) of an MNIST-format directory."""
    arrays = {}
    for key, name in IDX_FILES.items():
        path = directory / name
        arrays[key] = read_idx(path if path.exists() else directory / f"{name}.gz")
    return arrays


def imbalanced_split(
    labels: npt.NDArray[Any],
    *,
    rare_classes: Sequence[int],
    keep_fraction: float,
    val_per_class: int,
    seed: int,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(train, validation)`` example indices into the original training set.

    Each rare class keeps ``round(keep_fraction · n_c)`` (at least 1) of its ``n_c`` examples, drawn
    at random (App. B.3: 1% of each of 0-4); every other class keeps all of its examples.  The
    validation split takes ``val_per_class`` examples of every class from those the training set
    does not use (the rare classes' left-out examples, the other classes' held-out ones), so it is
    balanced like the test set.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction should lie in (0, 1], but got keep_fraction={keep_fraction!r}")
    if val_per_class < 0:
        raise ValueError(f"val_per_class should be >= 0, but got val_per_class={val_per_class!r}")
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        if int(c) in rare_classes:
            keep = max(1, round(keep_fraction * members.shape[0]))
            train.append(members[:keep])
            val.append(members[keep : keep + val_per_class])
        else:
            val.append(members[:val_per_class])
            train.append(members[val_per_class:])
    return np.sort(np.concatenate(train)).astype(np.int64), np.sort(np.concatenate(val)).astype(np.int64)


@dataclass(frozen=True)
class PrepareConfig:
    """Make the data available: MNIST downloaded into root, else Fashion-MNIST if installed."""

    root: str = "data"
    """Where MNIST's IDX files are (or are downloaded to)."""
    dataset: Dataset = "auto"
    """'auto', 'mnist' or 'fashion-mnist'."""
    explain: bool = True
    """When there is no data, say how to get it; false: exit 1 without a word (the caller says what it
    does instead: recipes/imbalanced_mnist/ensure_data.sh installs Fashion-MNIST)."""


def prepare(
    argv: Sequence[str] | None = None, prog: str = "python -m recipes.imbalanced_mnist prepare"
) -> None:
    """Find or download the data (:func:`locate_dataset`); exit 1 when there is none."""
    from recipes.common import cli

    config = cli.parse(PrepareConfig, sys.argv[1:] if argv is None else list(argv), prog=prog)
    try:
        name, directory = locate_dataset(config.root, config.dataset, download=True)
    except FileNotFoundError as error:
        if config.explain:
            print(error, file=sys.stderr)
        sys.exit(1)
    print(f"{DATASET_NAMES[name]} IDX files in {directory}")
