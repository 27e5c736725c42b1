#!/bin/bash
# run from the repository root on the device machine: bash research/next_gpu_call.sh (carry .whl); on an H200.
# one GPU call, most wanted first, each stage's files packed as it ends (a call cut short keeps what it did):
# 1. lesson 08's proton profile again (the recorded one names the tuned forward by a name it no longer has;
#    lesson 08's text says so, and says nothing of it once this replaces it);
# 2. the grouped-query forward's bench rows (B 1 and B 4 x Hq 32 x Hkv 8 x N 4096 x D 128) twice, the providers in
#    turns within each, for the spread of the recorded 0.97 / 0.99 x cuDNN at B 4;
# 3. the bench's D 64 causal rows with the ping-pong kernel from 4096 tokens against the route as it is, in
#    turns twice (research/README.md item 6).
# (lesson 12's grader tests passed on an H100 on 2026-12-06 and are left out.)
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # the figures below are the H200's only
  echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
hdr() { echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) torch $(python3 -c 'import torch;print(torch.__version__)') triton $(python3 -c 'import triton;print(triton.__version__)')"; echo "# command: $1"; }
cd_out() { (cd $OUT && tar czf "$1.tgz" $2 && rm -rf $2); }
{ hdr "python3 research/launch/proton_profile.py \$OUT/proton"; timeout 120 python3 research/launch/proton_profile.py $OUT/proton 2>&1 | tail -20; } > $OUT/proton.log 2>&1
tail -3 $OUT/proton.log
cd_out proton "proton proton.log"
G="flash_attention --kernel attention_fwd --shape B4-Hq32-Hkv8-N4096-D128 --shape B4-Hq32-Hkv8-N4096-D128-causal --shape B1-Hq32-Hkv8-N4096-D128 --shape B1-Hq32-Hkv8-N4096-D128-causal --provider triton --provider sdpa-flash --provider sdpa-cudnn --dtype float16"
for v in 1 2; do
  { hdr "python3 -m tkcourse bench $G --out \$OUT/gqa_rows_$v.csv"; timeout 120 python3 -m tkcourse bench $G --out $OUT/gqa_rows_$v.csv 2>&1 | tail -14; } >> $OUT/gqa_rows.log 2>&1
done
python3 research/hopper/route_bench.py --ratios $OUT/gqa_rows_*.csv | tee $OUT/gqa_ratios.txt
cd_out gqa "gqa_rows_1.csv gqa_rows_2.csv gqa_rows.log gqa_ratios.txt"
B="flash_attention --kernel attention_fwd --shape B4-H32-N4096-D64-causal --shape B1-H32-N16384-D64-causal --provider triton --provider sdpa-cudnn --dtype float16 --dtype bfloat16"
for v in base pp base2 pp2; do a=; case $v in pp*) a="--min-n 64,1=4096";; esac
  { hdr "research/hopper/route_bench.py $a -- $B"; timeout 80 python3 research/hopper/route_bench.py $a -- $B --out $OUT/route_d64c_$v.csv 2>&1 | tail -8; } >> $OUT/route_d64c.log 2>&1
done
python3 research/hopper/route_bench.py --ratios $OUT/route_d64c_*.csv | tee $OUT/route_ratios.txt
cd_out route "route_d64c_base.csv route_d64c_pp.csv route_d64c_base2.csv route_d64c_pp2.csv route_d64c.log route_ratios.txt"
