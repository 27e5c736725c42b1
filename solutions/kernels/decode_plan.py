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
  ``num_splits_heuristic`` reason alike). The time is the most work one SM runs: ``cdiv(programs,
  SMs)`` programs, each its steps plus one for filling its pipeline. One program alone on an SM does
  not stream the SM's share of the bandwidth: its loads wait on its own dot and softmax, and the bytes
  in flight that hide the memory latency come from a second program beside it (``IN_FLIGHT``, also
  what fits: a 128-token step's program holds about half an SM's registers). So an SM with fewer
  than ``IN_FLIGHT`` programs is charged as though it held ``IN_FLIGHT``: the model prefers two
  programs an SM of half the steps to one program an SM, and short splits, down to one step, where
  that brings the second program (the second program overlaps the first one's fill, which is why
  the first rule's floor of two steps a split goes). The kernel gives each split ``cdiv(steps,
  splits)`` steps, so a count that leaves splits empty is the same work as the smaller count that
  fills them, with more partials: ties go to fewer splits.

Tokens a step: a K tile of ``TILE_BYTES`` (128 fp16 tokens of D 128), except in the batch regime where
a program runs at most ``SHORT_STEPS`` steps (many short sequences at one split, B 64 x 1024): there
each SM works through several programs in turn, and each program's start (q, the first pages, the
pipeline's fill) and end (normalize, store) stream nothing unless another program on the SM streams
meanwhile. A half tile (64 tokens at D 128) holds half the K and V a step in registers, so more
programs share an SM and one's start and end hide behind the others' loads; on long programs those ends are a small
part of the time, and the full tile's fewer, larger steps win (the batch sweeps). The spread regime
keeps the full tile: there an SM holds one or two programs, and a smaller tile is fewer bytes in flight.

``plan(..., rule="v1")`` is the first rule (one program an SM counted as streaming its full share,
at least ``MIN_STEPS`` steps a split, the full tile everywhere), kept for ``research/decode/plan_probe.py``
to time beside the current one (``"v2"``). Plans are cached per key (``functools.lru_cache``), and
``decode_attention`` keeps each key's plan with its launchers, so a decode step does not plan.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

#: Cached tokens per split in the batch regime, by the number of (sequence, KV head) pairs: the split
#: count is cdiv(tokens, SPLIT_TOKENS). The H200 sweeps found the time sensitive to it (up to 1.2x
#: between neighbouring counts) and these the fastest or within 1% of it in both runs: 3 splits of
#: B 32 x 8192, 4 of B 8 x 32768, 5 of the mixed batch (logs: research/decode/logs/).
SPLIT_TOKENS = {256: 3072, 0: 8192}
#: Bytes of one K (or V) tile a step: 128 fp16 tokens of D 128. A step's K and V tiles pass through
#: shared memory (Triton's software pipeline copies them there asynchronously) and registers for the dots,
#: so tokens a step shrink as D or the element grow (D 256 fp16 or D 128 fp32: 64 tokens), keeping a
#: program's footprint what it is at D 128.
TILE_BYTES = 32768
MAX_BLOCK_N = 128
#: Warps and stages of the split kernel: 4 warps and 3 stages were the fastest or within 1% of it at
#: every shape of the H200 sweep with 128 tokens a step (research/decode/decode_check.py). The K and V
#: tiles' addresses come from the block-table load, and Triton's pipeliner gives such a load
#: ``(num_stages - 1) // 2`` stages of its own: at 3 or 4 stages one buffer of each tile, the next step's
#: copies issued after this step's dots, so loads and math take turns; from 5 stages two buffers. At
#: B 1 x 32768 two programs an SM at 3 stages (this plan) came within 2% of the best deeper pipeline (one
#: program an SM, 5 stages), and at B 1 x 4096 ahead of it (research/decode/stages_probe.py).
NUM_WARPS, NUM_STAGES, COMBINE_WARPS = 4, 3, 4
#: Programs an SM needs beside each other to stream its share of the bandwidth, in the spread
#: regime's model: fewer are charged as this many (module docstring). Two 128-token-step programs of
#: 4 warps are also what an SM's registers hold.
IN_FLIGHT = 2
#: In the batch regime, programs of at most this many steps (of the full tile) take half a tile a
#: step: their starts and ends then hide behind other programs on the SM (module docstring). It lies
#: between the H200's points, a short program where the half tile was faster and longer ones where the
#: full tile was (research/README.md, ``decode/plan_probe.py``); where in between is not measured.
SHORT_STEPS = 16
#: The first rule's (``rule="v1"``) fewest steps a split in the spread regime: it took a program of one
#: step to have nothing to overlap its first load with; the H200 found a second program an SM does that.
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


RULES = ("v1", "v2")


def batch_splits(pairs: int, tokens: int, sms: int) -> int | None:
    """The batch regime's split count for ``pairs`` (sequence, KV head) pairs of at most ``tokens``
    cached tokens, or None where those programs leave SMs idle (the spread regime)."""
    per = next(t for n, t in sorted(SPLIT_TOKENS.items(), reverse=True) if pairs >= n)
    batch = max(1, -(-tokens // per))
    return batch if pairs * batch >= sms else None


def split_count(pairs: int, steps: int, sms: int, tokens: int | None = None, rule: str = "v2") -> int:
    """Splits per (sequence, KV head) for ``pairs`` of them, each at most ``steps`` steps long
    (``tokens`` cached tokens: the batch regime's rule), on ``sms`` SMs (module docstring); ``rule``
    "v1" is the first rule."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    steps = max(1, steps)
    if tokens is not None:
        batch = batch_splits(pairs, tokens, sms)
        if batch is not None:  # the batch regime: every SM has a program already
            return min(batch, steps, MAX_SPLITS)
    if rule == "v1":
        most = max(1, min(steps // MIN_STEPS, MAX_SPLITS))
        best, best_cost = 1, None
        for s in range(1, most + 1):
            cost = -(-pairs * s // sms) * (-(-steps // s) + 1)  # programs an SM x (steps a program + its fill)
            if best_cost is None or cost < best_cost:
                best, best_cost = s, cost
        return best
    best, best_cost = 1, None
    for s in range(1, min(steps, MAX_SPLITS) + 1):
        per = -(-steps // s)  # steps a split, as the kernel shares them out
        if -(-steps // per) < s:
            continue  # some splits empty: the smaller count's work with more partials
        programs_an_sm = max(-(-pairs * s // sms), IN_FLIGHT)  # fewer than IN_FLIGHT stream no faster
        cost = programs_an_sm * (per + 1)  # (steps a program + its fill) for each program on the SM
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def plan(B: int, Hkv: int, D: int, element_size: int, page_size: int, max_pages: int, device,
         max_seq_len: int | None = None, num_sms: int | None = None, rule: str = "v2") -> Plan:
    """The plan for a batch of ``B`` sequences over a block table of ``max_pages`` pages of
    ``page_size`` tokens (``max_seq_len``: a tighter bound on the lengths, from the caller); ``rule``
    "v1" gives the first rule's plan (module docstring)."""
    device = torch.device(device)
    interpreter = device.type != "cuda"
    sms = sm_count(device) if num_sms is None else num_sms
    tokens = max_pages * page_size
    if max_seq_len is not None:
        tokens = max(1, min(tokens, max_seq_len))
    return _plan(B * Hkv, D, element_size, tokens, sms, interpreter, rule)


@functools.lru_cache(maxsize=4096)
def _plan(pairs: int, D: int, element_size: int, tokens: int, sms: int, interpreter: bool, rule: str) -> Plan:
    """``plan`` from what decides it (the page size only bounds ``tokens``), cached."""
    block_n = block_n_for(D, element_size, interpreter)
    steps = -(-tokens // block_n)
    splits = split_count(pairs, steps, sms, tokens, rule)
    if (rule != "v1" and not interpreter and block_n > 16 and batch_splits(pairs, tokens, sms) is not None
            and -(-steps // splits) <= SHORT_STEPS):
        block_n //= 2  # short programs, many an SM: half a tile a step (module docstring)
    block_s = max(1, min(1 << (splits - 1).bit_length(), 4096 // D))  # splits merged a step: (block_s, D) fp32
    return Plan(block_n, splits, block_s=block_s)
