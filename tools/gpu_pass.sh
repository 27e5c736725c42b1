#!/usr/bin/env bash
# The course's pass on a GPU machine with no network (how the recorded H200 figures are made).
#   bash tools/gpu_pass.sh "bench sweeps" OUT  # every reference kernel against its peers -> OUT/bench.csv,
#                                              # then the autotune sweeps -> OUT/sweeps.tgz
#   bash tools/gpu_pass.sh check OUT           # every grader and every notebook on the GPU
#   bash tools/gpu_pass.sh tests OUT           # the unit tests on the GPU (GPU-only ones included; > 10 min)
#   bash tools/gpu_pass.sh gputests OUT        # only the tests the CPU suite skips
#   bash tools/gpu_pass.sh "figures verify" OUT # the rows lessons 08 and 09 quote (small matmuls and
#                                              # attention, every softmax, add, rmsnorm and decode row),
#                                              # proton's profile; then graders, notebooks 00-01, 03-04,
#                                              # 07-09 and the GPU tests, side by side (correctness only)
#   bash tools/gpu_pass.sh figures08 OUT       # the same figures without lesson 09's rows
#                                              # (NO_PROTON=1 before either: the bench rows only)
#   bash tools/gpu_pass.sh online OUT          # the softmax rows (lessons 02 and 05), the kept-slots
#                                              # probe, then lessons 02, 05 and 08's graders, notebooks
#                                              # and GPU tests side by side
# Wheels for the notebook runtime come from `bash ../shared/gpu/wheelhouse.sh` (.whl/, carried along).
# Afterwards: copy OUT/bench.csv to tkcourse/data/h200/ (or merge some of its rows into it:
# python3 tools/merge_rows.py tkcourse/data/h200/bench.csv OUT/bench.csv --kernel ...) and unpack
# OUT/sweeps.tgz into tkcourse/data/.
set -uo pipefail
what=${1:?bench, sweeps and/or check}; OUT=${2:-artifacts/gpu}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
  python3 -m ipykernel install --user --name python3 >/dev/null 2>&1
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TKCOURSE_SOLUTIONS=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"
  date -u +%FT%TZ; } | tee -a "$OUT/gpu.txt"
for step in $what; do case $step in
bench)  # lesson by lesson into one table, so a lesson that fails or runs out of time loses only itself
  for l in $(python3 -c "import tkcourse.bench as b; print(*b.lessons())"); do
    python3 -m tkcourse bench $l --out "$OUT/bench.csv" --append >> "$OUT/bench.log" 2>&1
    echo "bench $l exit $?" | tee -a "$OUT/gpu.txt"
  done
  grep -E "\[(GB/s|TFLOP/s|GB)\]$" "$OUT/bench.log" | cut -c1-150 ;;
figures|figures08)  # figures08: lesson 08's rows only (add, softmax, small matmuls and attention)
  lessons="vector_add softmax rmsnorm decode_attention"; [ "$step" = figures08 ] && lessons="vector_add softmax"
  { for l in $lessons; do
      timeout 150 python3 -m tkcourse bench $l --out "$OUT/bench.csv" --append; echo "bench $l exit $?"; done
    timeout 120 python3 -m tkcourse bench matmul --out "$OUT/bench.csv" --append \
      --shape 512x512x512 --shape 1024x1024x1024 --shape 2048x2048x2048; echo "bench matmul exit $?"
    timeout 250 python3 -m tkcourse bench flash_attention --out "$OUT/bench.csv" --append --shape B1-H16-N512-D64 \
      --shape B1-H16-N512-D64-causal --shape B16-H32-N1024-D64 --shape B16-H32-N1024-D64-causal
    echo "bench flash_attention exit $?"; } >> "$OUT/bench.log" 2>&1
  grep -E "exit" "$OUT/bench.log" | tee -a "$OUT/gpu.txt"
  if [ -z "${NO_PROTON:-}" ]; then  # NO_PROTON=1: the bench rows only
    timeout 90 python3 research/launch/proton_profile.py "$OUT/proton" > "$OUT/proton.log" 2>&1
    echo "proton exit $?" | tee -a "$OUT/gpu.txt"; fi ;;
online)  # the exchange of lesson 05's one-read kernels: its rows and probe, then its checks side by side
  timeout 200 python3 -m tkcourse bench softmax --out "$OUT/bench.csv" --append > "$OUT/bench.log" 2>&1
  echo "bench softmax exit $?" | tee -a "$OUT/gpu.txt"
  timeout 120 python3 research/launch/slots_probe.py "$OUT" > "$OUT/slots_probe.log" 2>&1; echo "slots_probe exit $?" | tee -a "$OUT/gpu.txt"
  ( timeout 240 python3 -m tkcourse check softmax online_softmax launch > "$OUT/check.log" 2>&1
    echo "graders exit $?" >> "$OUT/gpu.txt" ) &
  ( env -u TKCOURSE_SOLUTIONS timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
      -k "02_ or 05_ or 08_" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" >> "$OUT/gpu.txt" ) &
  ( timeout 280 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_launch_lean.py tests/test_online_softmax.py \
      tests/test_softmax.py -k "not exercise and not planted" > "$OUT/gputests.log" 2>&1
    echo "gputests exit $?" >> "$OUT/gpu.txt" ) &
  wait; cat "$OUT/gpu.txt"; grep -E "^[a-z_]+ \(" "$OUT/check.log"; tail -4 "$OUT/notebooks.log" "$OUT/gputests.log"
  grep -E "^[KHG] " "$OUT/slots_probe.log"; grep -E "\[(GB/s|TFLOP/s|GB)\]$" "$OUT/bench.log" | cut -c1-190 ;;
verify)  # correctness only, so the three run side by side
  ( timeout 240 python3 -m tkcourse check > "$OUT/check.log" 2>&1; echo "graders exit $?" >> "$OUT/gpu.txt" ) &
  ( env -u TKCOURSE_SOLUTIONS timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
      -k "00_ or 01_ or 03_ or 04_ or 07_ or 08_ or 09_" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" >> "$OUT/gpu.txt" ) &
  ( timeout 280 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_traffic.py tests/test_launch_lean.py \
      tests/test_flash_attention_backward.py -k "not exercise and not planted" > "$OUT/gputests.log" 2>&1
    echo "gputests exit $?" >> "$OUT/gpu.txt" ) &
  wait; cat "$OUT/gpu.txt"; grep -E "^[a-z_]+ \(" "$OUT/check.log"; tail -4 "$OUT/notebooks.log" "$OUT/gputests.log" ;;
sweeps)
  sw=$OUT/sweeps/sweeps; mkdir -p "$sw"
  python3 -m tkcourse.autotune matmul --dtype float16 --out "$sw" \
    --shapes 4096x4096x4096,16x4096x4096,8192x8192x8192,512x512x512,1024x1024x1024,2048x2048x2048 > "$OUT/sweeps.log" 2>&1
  python3 -m tkcourse.autotune attention --dtype float16 --out "$sw" --shapes 4x16x4096x128 >> "$OUT/sweeps.log" 2>&1
  tar -C "$OUT/sweeps" -czf "$OUT/sweeps.tgz" sweeps && rm -r "$OUT/sweeps"
  grep -vE "^\[|^ *[0-9]+/" "$OUT/sweeps.log" | tail -25 ;;
check)
  python3 -m tkcourse check > "$OUT/check.log" 2>&1; echo "graders exit $?" | tee -a "$OUT/gpu.txt"
  grep -E "^[a-z_]+ \(" "$OUT/check.log"
  # as a learner runs them: untouched exercises, TKCOURSE_SOLUTIONS unset (tests/test_learner_path.py)
  env -u TKCOURSE_SOLUTIONS python3 -m pytest -q -p no:cacheprovider --durations=10 tests/test_learner_path.py \
    -k "${NOTEBOOKS:-notebook_as}" > "$OUT/notebooks.log" 2>&1
  echo "notebooks exit $?" | tee -a "$OUT/gpu.txt"; tail -15 "$OUT/notebooks.log" ;;
gputests)  # only the tests that the CPU suite skips (a few minutes; the whole suite takes longer on a GPU)
  python3 -m pytest -q -p no:cacheprovider -rA tests -k "on_a_gpu or one_read" > "$OUT/gputests.log" 2>&1
  echo "gputests exit $?" | tee -a "$OUT/gpu.txt"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/gputests.log" | tail -25 ;;
tests)
  python3 -m pytest -q -p no:cacheprovider -m "not browser" tests > "$OUT/tests.log" 2>&1
  echo "tests exit $?" | tee -a "$OUT/gpu.txt"; tail -15 "$OUT/tests.log" ;;
esac; done
