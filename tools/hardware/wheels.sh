#!/bin/bash
# Wheels of xpupool's runtime dependencies for a GPU host that reaches no package index
# (docs/hardware-validation.md): resolved from pyproject.toml for CPython 3.12 on x86-64 Linux,
# into .whl/ (which validate.sh and mig_power_elastic.sh install with --no-deps). The heavy
# packages a CUDA image already holds (numpy, scipy, matplotlib, numba and what they pull) are
# left out to keep the tree that travels small; set KEEP_ALL=1 to keep them.
set -euo pipefail
PY=${PY:-python3}
DEST=${DEST:-.whl}
mkdir -p "$DEST"
deps=$("$PY" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PY
)
mapfile -t reqs <<<"$deps"
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${reqs[@]}"
if [ -z "${KEEP_ALL:-}" ]; then
    for heavy in numpy scipy matplotlib numba llvmlite pillow fonttools contourpy kiwisolver; do
        rm -f "$DEST"/"$heavy"-*.whl
    done
fi
du -sh "$DEST"
