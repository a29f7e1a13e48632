#!/usr/bin/env bash
# The full-size performance report (docs/performance.md) of the built-in adapters on one CUDA GPU, in
# under 5 minutes: the seeds' shapes, every dtype, forward and forward+backward, timed with CUDA events
# and the L2 cache flushed between repetitions, against the GPU's measured copy bandwidth and matmul rate.
#
#   pip install -e '.[torch,bench]'                 # in an environment with a CUDA build of PyTorch
#   docs/gpu-bench.sh                                # report in reports/out/bench-gpu/
#   CUDA_VISIBLE_DEVICES=1 docs/gpu-bench.sh --perf-dtype bfloat16 --compare old/perf.json
#
# Environment: PYTHON (default python3), PERF_OUT (default reports/out/bench-gpu), PERF_BUDGET (seconds
# after which no new case starts, default 240), PERF_MAX_TIME (seconds of timing per case, default 0.25).
# Extra arguments go to pytest. Exit status: pytest's (0: every case ran or was skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
OUT="${PERF_OUT:-reports/out/bench-gpu}"

"$PYTHON" - <<'PY'
import sys

try:
    import pytest_benchmark  # noqa: F401
    import torch
except ImportError as exc:
    sys.exit(f"gpu-bench: {exc}; install the project with: pip install -e '.[torch,bench]'")
if not torch.cuda.is_available():
    sys.exit(f"gpu-bench: no CUDA GPU visible to torch {torch.__version__} (a CUDA build of PyTorch is needed)")
print(f"gpu-bench: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
PY

mkdir -p "$OUT"
exec "$PYTHON" -m pytest benchmarks -q -p no:cacheprovider \
    --perf-device cuda \
    --perf-out "$OUT" \
    --perf-max-time "${PERF_MAX_TIME:-0.25}" \
    --perf-budget "${PERF_BUDGET:-240}" \
    --benchmark-json "$OUT/pytest-benchmark.json" \
    "$@"
