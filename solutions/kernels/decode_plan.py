"""The launch plan of the fast decode attention (``kernels.decode_attention``): tokens a step, splits per
sequence, warps and stages, from the shapes the host knows and the GPU's SM count.

Decode reads each cached byte once and computes little on it, so its speed is how many of the GPU's
SMs are streaming K and V at once. A program per (sequence, KV head) gives ``B · Hkv`` programs: 8 at
B 1 with 8 KV heads, on a GPU of 132 SMs. Flash-Decoding (Dao et al. 2023) splits each sequence's cache
over several programs and merges their partial softmaxes afterwards; the split count is the plan's
main choice, and it must follow the work on the SMs, not the batch alone.

What the host knows without a device sync: the shapes. The lengths live on the device (reading them
would stall the host and cannot be captured in a CUDA graph), so the plan bounds the work by the
block table's capacity, ``max_pages · page_size`` tokens a sequence (a serving engine sizes the table
to the batch's longest sequence), or by the caller's ``max_seq_len`` where the table is wider than the
sequences. The kernel sizes the splits itself, from the length it reads (each split an equal share
of its sequence's steps), so whatever a sequence's real length below that bound, its steps spread
evenly over its splits: a loose bound costs only the partials of extra splits, never a split that
holds a whole sequence while the others idle.

Two regimes:

- **batch**: the batch alone fills the GPU. ``SPLIT_TOKENS`` (cached tokens per split, by the number
  of (sequence, KV head) pairs) is what the H200 sweeps of ``research/decode/decode_check.py`` found:
  a few splits of a long cache balance sequences of unequal lengths; one split is the whole sequence
  in one program, which then writes the output itself (no partials, no second kernel).
- **spread**: the batch leaves SMs idle (B 1, a few long sequences). The split count is the one
  that finishes first under a simple model of the GPU (FlashInfer's split-KV scheduler and FA2's
  ``num_splits_heuristic`` reason alike): one program an SM, its loads pipelined, already streams
  about that SM's share of the bandwidth, and several programs on one SM share it; so the time is
  the most steps one SM runs, ``cdiv(programs, SMs)`` times the steps of a program, plus one step a
  program for filling its pipeline. Each split keeps at least ``MIN_STEPS`` steps; ties go to fewer
  splits (fewer partials to write and merge).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Cached tokens per split in the batch regime, by the number of (sequence, KV head) pairs: the split
#: count is cdiv(tokens, SPLIT_TOKENS). The H200 sweeps found the time sensitive to it (up to 1.2x
#: between neighbouring counts) and these the fastest or within 1% of it in both runs: 3 splits of
#: B 32 x 8192, 4 of B 8 x 32768, 5 of the mixed batch (logs: research/decode/logs/).
SPLIT_TOKENS = {256: 3072, 0: 8192}
#: Bytes of one K (or V) tile a step: 128 fp16 tokens of D 128. The software pipeline stages K and V
#: tiles in shared memory and the dot holds them in registers, so tokens a step shrink as D or the
#: element grow (D 256 fp16 or D 128 fp32: 64 tokens), keeping a program's footprint what it is at D 128.
TILE_BYTES = 32768
MAX_BLOCK_N = 128
#: Warps and stages of the split kernel: 4 warps and 3 stages were the fastest or within 1% of it at
#: every shape of the H200 sweep with 128 tokens a step (research/decode/decode_check.py).
NUM_WARPS, NUM_STAGES, COMBINE_WARPS = 4, 3, 4
#: Fewest steps a split keeps in the spread regime: a program of one step has nothing to overlap its
#: first load with.
MIN_STEPS = 2
#: Most splits a sequence: the partials grow with it, and past a wave of programs more splits only
#: add waves.
MAX_SPLITS = 128
#: The interpreter's plan: 16 tokens a step (it runs every program in turn; several steps and splits
#: show the kernels at work on small caches) and 4 "SMs". Tests set other SM counts in ``_SMS``.
INTERPRETER_BLOCK_N, INTERPRETER_SMS = 16, 4

_SMS: dict = {}  # device -> SM count, looked up once per device


def sm_count(device) -> int:
    """Streaming multiprocessors of ``device`` (``INTERPRETER_SMS`` for the CPU), looked up once."""
    device = torch.device(device)
    key = (device.type, device.index)
    n = _SMS.get(key)
    if n is None:
        if device.type != "cuda":
            n = INTERPRETER_SMS
        else:
            n = torch.cuda.get_device_properties(device).multi_processor_count
        _SMS[key] = n
    return n


@dataclass(frozen=True)
class Plan:
    """One launch: ``block_n`` tokens a step, ``splits`` programs a (sequence, KV head), the split
    kernel's ``num_warps``/``num_stages``, the combine's warps and ``block_s`` splits merged a step."""

    block_n: int
    splits: int
    num_warps: int = NUM_WARPS
    num_stages: int = NUM_STAGES
    combine_warps: int = COMBINE_WARPS
    block_s: int = 1

    @property
    def one_split(self) -> bool:
        """One split: the split kernel writes the output, no combine."""
        return self.splits == 1


def block_n_for(D: int, element_size: int, interpreter: bool = False) -> int:
    """Tokens a step: a K tile of ``TILE_BYTES`` (at most ``MAX_BLOCK_N`` tokens, at least 16)."""
    if interpreter:
        return INTERPRETER_BLOCK_N
    return max(16, min(MAX_BLOCK_N, TILE_BYTES // (D * element_size)))


def split_count(pairs: int, steps: int, sms: int, tokens: int | None = None) -> int:
    """Splits per (sequence, KV head) for ``pairs`` of them, each at most ``steps`` steps long
    (``tokens`` cached tokens: the batch regime's rule), on ``sms`` SMs (module docstring)."""
    steps = max(1, steps)
    if tokens is not None:
        per = next(t for n, t in sorted(SPLIT_TOKENS.items(), reverse=True) if pairs >= n)
        batch = max(1, -(-tokens // per))
        if pairs * batch >= sms:  # the batch regime: every SM has a program already
            return min(batch, steps, MAX_SPLITS)
    most = max(1, min(steps // MIN_STEPS, MAX_SPLITS))
    best, best_cost = 1, None
    for s in range(1, most + 1):
        cost = -(-pairs * s // sms) * (-(-steps // s) + 1)  # programs an SM x (steps a program + its fill)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def plan(B: int, Hkv: int, D: int, element_size: int, page_size: int, max_pages: int, device,
         max_seq_len: int | None = None, num_sms: int | None = None) -> Plan:
    """The plan for a batch of ``B`` sequences over a block table of ``max_pages`` pages of
    ``page_size`` tokens (``max_seq_len``: a tighter bound on the lengths, from the caller)."""
    device = torch.device(device)
    interpreter = device.type != "cuda"
    block_n = block_n_for(D, element_size, interpreter)
    sms = sm_count(device) if num_sms is None else num_sms
    tokens = max_pages * page_size
    if max_seq_len is not None:
        tokens = max(1, min(tokens, max_seq_len))
    splits = split_count(B * Hkv, -(-tokens // block_n), sms, tokens)
    block_s = max(1, min(1 << (splits - 1).bit_length(), 4096 // D))  # splits merged a step: (block_s, D) fp32
    return Plan(block_n, splits, block_s=block_s)
