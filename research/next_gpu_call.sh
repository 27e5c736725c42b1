#!/bin/bash
# run from the repository root on the device machine: bash research/next_gpu_call.sh (carry .whl)
# one GPU call: the grader tests of lessons 03, 05, 06, 07, 09, 10, 12 (idle loads, reads, the clamp hint), then
# research/README.md item 6 (the D 64 causal route, in turns once), then
# research/decode/pattern_probe.py (the decode cache's read pattern at B 1 x 32768)
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
hdr() { echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)') triton $(python3 -c 'import triton;print(triton.__version__)') code $(git rev-parse --short HEAD 2>/dev/null || echo tree)"; echo "# command: $1"; }
G="tests/test_grader_attention.py tests/test_grader_decode.py tests/test_grader_hints_early.py tests/test_grader_traffic.py tests/test_grader_compiles.py"
T="tests/test_matmul.py tests/test_softmax.py tests/test_rmsnorm.py tests/test_online_softmax.py tests/test_int4_matmul.py tests/test_hopper.py"
{ hdr "python3 -m pytest -q -p no:cacheprovider $G"; timeout 180 python3 -m pytest -q -p no:cacheprovider $G 2>&1 | tail -30; echo "rc ${PIPESTATUS[0]}"; } > $OUT/gpu_tests.log 2>&1
{ hdr "python3 -m pytest -q -p no:cacheprovider $T"; timeout 100 python3 -m pytest -q -p no:cacheprovider $T 2>&1 | tail -30; echo "rc ${PIPESTATUS[0]}"; } > $OUT/gpu_tests2.log 2>&1
for v in base pp; do a=; case $v in pp*) a="--min-n 64,1=1024";; esac
  { hdr "research/hopper/route_bench.py $a -- flash_attention --kernel attention_fwd --shape B4-H32-N4096-D64-causal --shape B16-H32-N1024-D64-causal --provider triton --provider sdpa-cudnn --dtype float16 --dtype bfloat16"
    timeout 70 python3 research/hopper/route_bench.py $a -- flash_attention --kernel attention_fwd --shape B4-H32-N4096-D64-causal --shape B16-H32-N1024-D64-causal --provider triton --provider sdpa-cudnn --dtype float16 --dtype bfloat16 --out $OUT/route_d64c_$v.csv 2>&1 | tail -12; } >> $OUT/route_d64c.log 2>&1
done
{ hdr "research/decode/pattern_probe.py OUT"; timeout 90 python3 research/decode/pattern_probe.py $OUT; } > $OUT/pattern_probe.log 2>&1
python3 research/hopper/route_bench.py --ratios $OUT/route_d64c_*.csv > $OUT/route_ratios.txt 2>&1
tail -4 $OUT/gpu_tests.log $OUT/gpu_tests2.log; cat $OUT/route_ratios.txt; tail -8 $OUT/pattern_probe.log
