#!/usr/bin/env bash
# The wheels a lent GPU machine lacks (its image has torch, numba, opencv, matplotlib, but no
# gymnasium, ale-py, tyro or ray), downloaded here for Python 3.12, into git-ignored folders that
# `run` carries (64 MiB per call):
#
#   bash benchmarks/gpu_wheels.sh          # .whl/: gymnasium, ale-py and the rest (carry [".whl"])
#   bash benchmarks/gpu_wheels.sh ray      # .whl-ray/a, .whl-ray/b: ray 2.60 (79 MB) split in two
#
# ray does not fit one call's carry, so it travels in two calls: the first carries .whl-ray/a
# (`run` keeps ignored files already there between calls while the machine stays warm), the
# second carries .whl-ray/b and .whl; `gpu_session.sh apex` joins the halves and installs.
set -eu
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d "$@"; }
if [ "${1:-}" = ray ]; then
  mkdir -p .whl-ray /tmp/ray-whl
  get /tmp/ray-whl ray==2.60.0
  # ray's needs the image lacks (the others: click, filelock, msgpack, protobuf, ... are there)
  get .whl jsonschema jsonschema-specifications referencing rpds-py
  split -n 2 -d /tmp/ray-whl/ray-2.60.0-*.whl .whl-ray/part
  mv .whl-ray/part00 .whl-ray/a; mv .whl-ray/part01 .whl-ray/b
  ls -la .whl-ray
  exit 0
fi
mkdir -p .whl
get .whl gymnasium ale-py farama-notifications tyro docstring-parser shtab typeguard
ls .whl
