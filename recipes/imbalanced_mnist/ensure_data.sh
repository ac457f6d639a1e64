#!/bin/sh
# Data for the imbalanced-MNIST recipe (recipes/imbalanced_mnist/data.py): MNIST when it is under ROOT or can be downloaded there;
# otherwise Fashion-MNIST from Debian's dataset-fashion-mnist package, installed when missing.
# Usage: sh recipes/imbalanced_mnist/ensure_data.sh [PYTHON] [ROOT]
PYTHON=${1:-python3}
ROOT=${2:-data}
"$PYTHON" -m recipes.imbalanced_mnist prepare --root "$ROOT" && exit 0
echo "MNIST is unavailable: installing Fashion-MNIST (Debian package dataset-fashion-mnist)" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq dataset-fashion-mnist \
  || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq dataset-fashion-mnist; } \
  || exit 1
"$PYTHON" -m recipes.imbalanced_mnist prepare --root "$ROOT"
