#!/usr/bin/env bash
# The wheels of what OrthoLab needs and the GPU machine's image lacks (docs/gpus.md), for that machine's CPython 3.12
# on manylinux x86_64, into .whl/ (ignored; carried to the device call, where tools/gpu_check.py installs them with
# `pip install --no-index --no-deps --target`). Each at the version installed here, so the device runs what CI ran.
#   bash tools/gpu_wheels.sh [DEST]      (PYTHON: the interpreter whose installed versions are taken; default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.whl}"
PYTHON="${PYTHON:-.venv/bin/python}"
# the distributions themselves and the ones they need that the image lacks (tests/test_gpu_check.py checks the closure)
MISSING="sqlalchemy alembic mako jsonargparse docstring-parser typeshed-client soundfile cffi pycparser platformdirs"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
mkdir -p "$DEST"
rm -f "$DEST"/*.whl
for name in $MISSING; do
  version=$("$PYTHON" -c 'import importlib.metadata, sys; print(importlib.metadata.version(sys.argv[1]))' "$name")
  # shellcheck disable=SC2086  # PLATFORMS is a list of flags
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    $PLATFORMS -d "$DEST" "$name==$version"
done
echo "$(ls "$DEST"/*.whl | wc -l) wheels in $DEST ($(du -sh "$DEST" | cut -f1))"
