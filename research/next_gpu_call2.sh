#!/bin/bash
# run from the repository root on the device machine: bash research/next_gpu_call2.sh (carry .whl)
# the grouped-query forward rows of B 4 x Hq 32 x Hkv 8 x N 4096 x D 128 (0.97 / 0.99x cuDNN eager / graph,
# where 1.0x is asked): the route as it is against the ping-pong kernel a program a tile (persistence off)
# and against EARLY off, in turns twice, then the ratios (research/README.md, "Ready for the next GPU session")
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
hdr() { echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)') triton $(python3 -c 'import triton;print(triton.__version__)') code $(git rev-parse --short HEAD 2>/dev/null || echo tree)"; echo "# command: $1"; }
S="--shape B4-Hq32-Hkv8-N4096-D128 --shape B4-Hq32-Hkv8-N4096-D128-causal"
for v in base np early base2 np2 early2; do a=; case $v in np*) a="--persistent-max-n 0=0 --persistent-max-n 1=0";; early*) a="--early 128,0=0 --early 128,1=0";; esac
  { hdr "research/hopper/route_bench.py $a -- flash_attention --kernel attention_fwd $S --provider triton --provider sdpa-cudnn --dtype float16"
    timeout 80 python3 research/hopper/route_bench.py $a -- flash_attention --kernel attention_fwd $S --provider triton --provider sdpa-cudnn --dtype float16 --out $OUT/gqa_$v.csv 2>&1 | tail -8; } >> $OUT/gqa_route.log 2>&1
done
python3 research/hopper/route_bench.py --ratios $OUT/gqa_*.csv > $OUT/gqa_ratios.txt 2>&1
cat $OUT/gqa_ratios.txt
