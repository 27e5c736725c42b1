#!/usr/bin/env bash
# The course's pass on a GPU machine with no network (how the recorded H200 figures are made).
#   bash tools/gpu_pass.sh "bench sweeps" OUT  # every reference kernel against its peers -> OUT/bench.csv,
#                                              # then the autotune sweeps -> OUT/sweeps.tgz
#   bash tools/gpu_pass.sh check OUT           # every grader and every notebook on the GPU
#   bash tools/gpu_pass.sh tests OUT           # the unit tests on the GPU (GPU-only ones included; > 10 min)
#   bash tools/gpu_pass.sh gputests OUT        # only the tests the CPU suite skips
#   bash tools/gpu_pass.sh "figures verify" OUT # the rows lessons' prose quotes (small matmuls and
#                                              # attention, every softmax, add, rmsnorm and decode row),
#                                              # proton's profile; then every grader, the verify step's
#                                              # notebooks and GPU tests, side by side (correctness only)
#   bash tools/gpu_pass.sh figures08 OUT       # the same figures, only the rows lesson 08 quotes
#                                              # (NO_PROTON=1 before either: the bench rows only)
#   bash tools/gpu_pass.sh online OUT          # the softmax rows (lessons 02 and 05), the kept-slots
#                                              # probe, then the online step's graders, notebooks and
#                                              # GPU tests side by side
#   bash tools/gpu_pass.sh int4 OUT            # lesson 10: the int4 sweep, then its bench rows on the
#                                              # configs it chose (OUT/bench.csv, OUT/int4_configs.json:
#                                              # commit them as CONFIGS), lesson 10's grader and notebook
#   bash tools/gpu_pass.sh llm OUT             # lesson 11 (PROBE=1 before it: first the matmul at decode
#                                              # sizes against cuBLAS, research/llm/matmul_decode_probe.py),
#                                              # the model's tokens/s against torch.compile and a
#                                              # profile of one decode step (OUT/llm.json: copy it to
#                                              # tkcourse/data/h200/llm.json with its provenance), then
#                                              # lesson 11's notebook as a learner runs it
#   bash tools/gpu_pass.sh hopper OUT          # lesson 12: its rows (Gluon and persistent matmuls against
#                                              # cuBLAS, Gluon attention against cuDNN) in one run, then
#                                              # its grader, notebook and GPU tests side by side
#   bash tools/gpu_pass.sh inference OUT       # inference kernels at model sizes in one run: every
#                                              # decode_attention and decode_step row, the GQA attention
#                                              # rows, then the GQA correctness grid and the decode probe
# Which lessons a step runs, and which rows and sweeps it records, the lesson registry says
# (tkcourse/course.py: each Lesson's gpu_passes, gpu_tests, quotes and sweeps); the script asks it.
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
ask() { python3 -c 'import sys, tkcourse.course as c; sys.exit(c.main())' "$@"; }  # the registry's lists
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
  quoting=""; [ "$step" = figures08 ] && quoting=08
  mapfile -t rows < <(ask quotes $quoting)  # one line a benchmark: NAME [--shape S ...]
  { for row in "${rows[@]}"; do
      set -- $row; b=$1; shift
      timeout 250 python3 -m tkcourse bench "$b" --out "$OUT/bench.csv" --append "$@"; echo "bench $b exit $?"; done
  } >> "$OUT/bench.log" 2>&1
  grep -E "exit" "$OUT/bench.log" | tee -a "$OUT/gpu.txt"
  if [ -z "${NO_PROTON:-}" ]; then  # NO_PROTON=1: the bench rows only
    timeout 90 python3 research/launch/proton_profile.py "$OUT/proton" > "$OUT/proton.log" 2>&1
    echo "proton exit $?" | tee -a "$OUT/gpu.txt"; fi ;;
online)  # the exchange of lesson 05's one-read kernels: its rows and probe, then its checks side by side
  for b in $(ask benchmarks online); do
    timeout 200 python3 -m tkcourse bench "$b" --out "$OUT/bench.csv" --append >> "$OUT/bench.log" 2>&1
    echo "bench $b exit $?" | tee -a "$OUT/gpu.txt"; done
  timeout 120 python3 research/launch/slots_probe.py "$OUT" > "$OUT/slots_probe.log" 2>&1; echo "slots_probe exit $?" | tee -a "$OUT/gpu.txt"
  graders=$(ask graders online) notebooks=$(ask notebooks online) tests=$(ask tests online)
  ( timeout 240 python3 -m tkcourse check $graders > "$OUT/check.log" 2>&1
    echo "graders exit $?" >> "$OUT/gpu.txt" ) &
  ( env -u TKCOURSE_SOLUTIONS timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
      -k "$notebooks" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" >> "$OUT/gpu.txt" ) &
  ( timeout 280 python3 -m pytest -q -p no:cacheprovider -rfE $tests \
      -k "not exercise and not planted" > "$OUT/gputests.log" 2>&1
    echo "gputests exit $?" >> "$OUT/gpu.txt" ) &
  wait; cat "$OUT/gpu.txt"; grep -E "^[a-z_]+ \(" "$OUT/check.log"; tail -n 4 "$OUT/notebooks.log" "$OUT/gputests.log"
  grep -E "^[KHG] " "$OUT/slots_probe.log"; grep -E "\[(GB/s|TFLOP/s|GB)\]$" "$OUT/bench.log" | cut -c1-190 ;;
verify)  # correctness only, so the three run side by side
  notebooks=$(ask notebooks verify) tests=$(ask tests verify)
  ( timeout 240 python3 -m tkcourse check > "$OUT/check.log" 2>&1; echo "graders exit $?" >> "$OUT/gpu.txt" ) &
  ( env -u TKCOURSE_SOLUTIONS timeout 400 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
      -k "$notebooks" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" >> "$OUT/gpu.txt" ) &
  ( timeout 280 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_traffic.py $tests \
      -k "not exercise and not planted" > "$OUT/gputests.log" 2>&1
    echo "gputests exit $?" >> "$OUT/gpu.txt" ) &
  wait; cat "$OUT/gpu.txt"; grep -E "^[a-z_]+ \(" "$OUT/check.log"; tail -n 4 "$OUT/notebooks.log" "$OUT/gputests.log" ;;
int4)  # lesson 10's sweep times every candidate, then records the bench rows with the winners as CONFIGS
  timeout 400 python3 research/int4/sweep.py "$OUT" > "$OUT/int4.log" 2>&1; echo "int4 sweep exit $?" | tee -a "$OUT/gpu.txt"
  graders=$(ask graders int4) notebooks=$(ask notebooks int4)
  timeout 60 python3 -m tkcourse check $graders > "$OUT/check.log" 2>&1; echo "graders exit $?" | tee -a "$OUT/gpu.txt"
  env -u TKCOURSE_SOLUTIONS timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
    -k "$notebooks" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" | tee -a "$OUT/gpu.txt"
  grep -vi warn "$OUT/int4.log" | tail -42 ;;
llm)  # the capstone's figures in one run (under 10 minutes, the wheels carried), then its notebook on the GPU
  if [ -n "${PROBE:-}" ]; then  # PROBE=1: first the 16-bit matmul at decode sizes against cuBLAS (about 70 s)
    timeout 150 python3 research/llm/matmul_decode_probe.py --json "$OUT/matmul_decode.json" > "$OUT/matmul_decode.log" 2>&1
    echo "matmul decode probe exit $?" | tee -a "$OUT/gpu.txt"; fi
  timeout 420 python3 research/llm/bench_llm.py --budget 400 --json "$OUT/llm.json" > "$OUT/llm.log" 2>&1
  echo "bench_llm exit $?" | tee -a "$OUT/gpu.txt"
  notebooks=$(ask notebooks llm)
  env -u TKCOURSE_SOLUTIONS timeout 130 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
    -k "$notebooks" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" | tee -a "$OUT/gpu.txt"
  tail -3 "$OUT/notebooks.log"; grep -v Warning "$OUT/llm.log" | tail -30 ;;
hopper)  # lesson 12: its rows against cuBLAS and cuDNN in one run, then its grader, notebook and GPU tests
  for b in $(ask benchmarks hopper); do
    timeout 330 python3 -m tkcourse bench "$b" --out "$OUT/bench.csv" --append >> "$OUT/bench.log" 2>&1
    echo "bench $b exit $?" | tee -a "$OUT/gpu.txt"; done
  graders=$(ask graders hopper) notebooks=$(ask notebooks hopper) tests=$(ask tests hopper)
  ( timeout 150 python3 -m tkcourse check $graders > "$OUT/check.log" 2>&1; echo "graders exit $?" >> "$OUT/gpu.txt" ) &
  ( env -u TKCOURSE_SOLUTIONS timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_learner_path.py \
      -k "$notebooks" > "$OUT/notebooks.log" 2>&1; echo "notebooks exit $?" >> "$OUT/gpu.txt" ) &
  ( timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE $tests -k "not planted" > "$OUT/gputests.log" 2>&1
    echo "gputests exit $?" >> "$OUT/gpu.txt" ) &
  wait; cat "$OUT/gpu.txt"; grep -E "^[a-z_]+ \(" "$OUT/check.log"; tail -n 4 "$OUT/notebooks.log" "$OUT/gputests.log"
  grep -E "\[(GB/s|TFLOP/s|GB)\]$" "$OUT/bench.log" | cut -c1-190 ;;
inference)  # one run for every row the inference kernels' figures need, so that their ratios share it
  mapfile -t rows < <(ask records inference)  # one line a benchmark: NAME [--shape S ...]
  for row in "${rows[@]}"; do
    set -- $row; b=$1; shift
    timeout 240 python3 -m tkcourse bench "$b" --out "$OUT/bench.csv" --append "$@" >> "$OUT/bench.log" 2>&1
    echo "bench $b exit $?" | tee -a "$OUT/gpu.txt"; done
  timeout 170 python3 research/attention/gqa_probe.py C --out "$OUT/gqa.json" > "$OUT/gqa.log" 2>&1
  echo "gqa probe exit $?" | tee -a "$OUT/gpu.txt"
  timeout 100 python3 research/decode/plan_probe.py "$OUT/decode" > "$OUT/decode.log" 2>&1
  echo "decode probe exit $?" | tee -a "$OUT/gpu.txt"
  tail -3 "$OUT/gqa.log"; tail -25 "$OUT/decode.log"
  grep -E "\[(GB/s|TFLOP/s|GB)\]$" "$OUT/bench.log" | cut -c1-190 ;;
sweeps)
  sw=$OUT/sweeps/sweeps; mkdir -p "$sw"
  mapfile -t rows < <(ask sweeps)  # one line a kernel: NAME SHAPES
  for row in "${rows[@]}"; do
    set -- $row
    python3 -m tkcourse.autotune "$1" --dtype float16 --out "$sw" --shapes "$2" >> "$OUT/sweeps.log" 2>&1; done
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
