#!/usr/bin/env bash
# Run the GPU-capable built-in adapters natively on one CUDA GPU and write one report per adapter.
#
#   bash docs/gpu-check.sh [ADAPTER ...]     (default: torch torch-compile, plus jax and liger where installed)
#
# Needs a machine with an NVIDIA GPU and a CUDA build of PyTorch (install the project with
# `pip install -e .[torch]` in an environment whose torch sees the GPU; `.[liger]` for Liger-Kernel, whose
# Triton kernels then run compiled, in bfloat16 too — never under TRITON_INTERPRET, which this script clears).
# Reports go to reports/out/gpu/<adapter>/.
# The CI profile is deterministic, so a GPU run is directly comparable with a CPU run of the same suite version.
set -euo pipefail
cd "$(dirname "$0")/.."

python - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY

adapters=("$@")
if [ ${#adapters[@]} -eq 0 ]; then
    adapters=(torch torch-compile)
    python -c "import jax" 2>/dev/null && adapters+=(jax)
    python -c "import liger_kernel, triton" 2>/dev/null && adapters+=(liger liger-gemma liger-none)
fi
unset TRITON_INTERPRET  # Liger's kernels compiled for the GPU, not interpreted

status=0
for a in "${adapters[@]}"; do
    echo "== $a on cuda"
    timeout 600 transformer-conformance -q -n 4 --adapter "$a" --device cuda \
        --report-dir "reports/out/gpu/$a" || status=1
    if [[ "$a" == liger* ]]; then  # the kernels must have run compiled, not under Triton's interpreter
        python - "$a" <<'PY' || status=1
import json, sys
env = json.load(open(f"reports/out/gpu/{sys.argv[1]}/report.json"))["adapters"][0]["environment"]
print("triton mode:", env.get("triton mode"))
assert env.get("triton mode") == "compiled", env
PY
    fi
done
exit $status
