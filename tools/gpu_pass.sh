#!/usr/bin/env bash
# One full pass on a GPU machine with no network (the course's H200): install the carried wheels,
# run the whole test suite and every notebook on the GPU, then the benchmarks, into $OUT.
#   usage: bash tools/gpu_pass.sh [OUT_DIR] [bench lessons...]
# The wheels come from `bash ../shared/gpu/wheelhouse.sh` (written to .whl/ and carried along).
set -uo pipefail
OUT=${1:-${OUT:-artifacts/gpu}}; shift || true
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
  python3 -m ipykernel install --user --name python3 >/dev/null
fi
export PYTHONUNBUFFERED=1 TKCOURSE_SOLUTIONS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
( time python3 -m pytest -q -x --nbval-lax -p no:cacheprovider -m "not browser" tests notebooks ) > "$OUT/pytest.log" 2>&1
echo "pytest exit $?" | tee -a "$OUT/gpu.txt"; tail -5 "$OUT/pytest.log"
python3 -m tkcourse bench "$@" --out "$OUT/bench.csv" 2>&1 | tee "$OUT/bench.log" | grep -v '^\[' 
