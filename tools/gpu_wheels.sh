#!/usr/bin/env bash
# Fills .whl/ with the wheels tools/gpu_check.sh needs on the GPU machine (Python 3.12,
# x86_64, no network there): the project's own pure-Python needs that its image lacks.
# sglang itself does not fit the 64 MiB the working tree may carry (docs/engine.md, GPU
# check); name extra requirements as arguments to add them.
#
#   bash tools/gpu_wheels.sh [REQUIREMENT ...]
set -eu -o pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl \
    "sqlalchemy==2.1.9" "greenlet==3.5.6" "alembic==1.20.1" "mako==1.4.3" \
    "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" \
    "typing-inspection==0.4.5" "structlog==26.1.0" "orjson==3.13.0" "$@"
du -sh .whl
