#!/usr/bin/env bash
# Runs the SGLang adapter's speed windows, audit and quality once, for real, on a GPU host.
#
#   bash tools/gpu_check.sh [--dtype bfloat16|float32] [--engine sglang|torch-reference]
#
# Run from anywhere; results go to $OUT when set, else ./gpu-check-out (at most 8 files):
# host.txt, gpu-check.log, ledger.db, explain.json, replay.json, stages.json, summary.txt.
# Wheels under .whl/ (tools/gpu_wheels.sh fills it) are installed into a scratch folder
# first; the project itself is put on PYTHONPATH, which the lane and scheduler processes
# inherit (they import engine_bridge.hooks by name). See docs/engine.md, "GPU check".
#
# Exit codes: 0 concluded and replayed; 1 ran but failed (see gpu-check.log); 2 the attempt
# ended in an infrastructure fault (in the ledger and summary.txt); 3 sglang cannot be
# imported; 4 no CUDA GPU; 5 the wheels or the project's own dependencies are missing.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-./gpu-check-out}"
py="${PYTHON:-python3}"
site="${GPU_CHECK_SITE:-/tmp/gpu-check-site}"
wheels="${GPU_CHECK_WHEELS:-.whl}"
mkdir -p "$out" || exit 1
log="$out/gpu-check.log"
: >"$log"

say() {  # one line to stderr and the log
    echo "$1" | tee -a "$log" >&2
}

# 1. The host: GPU, driver, python, torch and what torch sees.
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname: $(uname -srm)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    else
        echo "nvidia-smi: not found"
    fi
    echo "python: $("$py" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
    "$py" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda,
"available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())' 2>&1 \
        | tail -n 1
} >"$out/host.txt"
cat "$out/host.txt" | tee -a "$log"

# 2. Install what travelled under .whl/ (the project's pure-Python needs, sglang if carried).
pythonpath="$PWD"
if compgen -G "$wheels/*.whl" >/dev/null; then
    if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "$wheels"/*.whl >>"$log" 2>&1; then
        say "gpu-check: installing the wheels under $wheels/ failed (pip's output is in $log)"
        exit 5
    fi
    pythonpath="$pythonpath:$site"
fi
export PYTHONPATH="$pythonpath${PYTHONPATH:+:$PYTHONPATH}"
missing="$("$py" - <<'EOF' 2>>"$log"
import importlib.util
needed = ("alembic", "mako", "orjson", "pydantic", "pydantic_core", "rich", "sqlalchemy",
          "structlog", "typer", "safetensors", "numpy", "torch", "transformers")
print(" ".join(n for n in needed if importlib.util.find_spec(n) is None))
EOF
)" || missing="(python itself failed: see $log)"
if [ -n "$missing" ]; then
    say "gpu-check: the project's dependencies are missing: $missing; carry their wheels under .whl/ (bash tools/gpu_wheels.sh)"
    exit 5
fi

# 3 and 4. The attempt (gpu_check.py checks sglang and CUDA first, one line and 3 or 4).
export PYTHONUNBUFFERED=1
"$py" tools/gpu_check.py --out "$out" "$@" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
