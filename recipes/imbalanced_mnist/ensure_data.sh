#!/bin/sh
# Data for the imbalanced-MNIST recipe (recipes/imbalanced_mnist/data.py): MNIST when it is under ROOT or can be
# downloaded there; otherwise Fashion-MNIST from Debian's dataset-fashion-mnist package, which this script installs
# with apt-get (as root, through sudo when not root) after saying so, unless PRISAMPLE_NO_APT=1.
# Usage: sh recipes/imbalanced_mnist/ensure_data.sh [PYTHON] [ROOT]
PYTHON=${1:-python3}
ROOT=${2:-data}
"$PYTHON" -m recipes.imbalanced_mnist prepare --root "$ROOT" --explain false && exit 0
if [ "${PRISAMPLE_NO_APT:-0}" = 1 ]; then
  echo "MNIST is not under $ROOT/ and cannot be downloaded here, and PRISAMPLE_NO_APT=1: Debian's" \
    "dataset-fashion-mnist package is not installed, so the imbalanced-MNIST comparison cannot run;" \
    "put MNIST's IDX files under $ROOT/MNIST/raw/ to run it" >&2
  exit 1
fi
echo "Installing Debian's dataset-fashion-mnist package (Fashion-MNIST) with apt-get, as root: MNIST is not" \
  "under $ROOT/ and cannot be downloaded here. To avoid it, put MNIST's IDX files under $ROOT/MNIST/raw/," \
  "or set PRISAMPLE_NO_APT=1 (make demo then stops before the comparison)." >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq dataset-fashion-mnist \
  || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq dataset-fashion-mnist; } \
  || exit 1
"$PYTHON" -m recipes.imbalanced_mnist prepare --root "$ROOT"
