"""Grader for lesson 03: ``matmul(a, b)``, a tiled matmul of any sizes and strides.

Fixed shapes (primes, size 1, K not a multiple of any BLOCK_K), strided layouts the API reads in place
(transposed, a slice of a wider tensor, every other row), random shapes with K up to 1500 (a K loop
bound hard-coded to fit the fixed shapes fails there), and one fp16 case whose dot products are long
sums of positive values, where an fp16 accumulator loses digits that an fp32 one keeps, and one config
whose tiles are not square (a grid that swaps BLOCK_M and BLOCK_N passes square ones). Every launch
is traced; aliasing and modified inputs fail (``core.attempt``).
"""

from __future__ import annotations

import math
import traceback

import numpy as np
import torch

from .. import mode
from .core import (
    attempt,
    describe_wrong,
    exception_chain,
    out_records,
    padded,
    random_sizes,
    refuses,
    row_padded,
    seeded,
    sliced_rows,
)

# (M, N, K, layout): primes, size 1, K not a multiple of any BLOCK_K, transposed inputs
SHAPES = [(67, 45, 29, ""), (128, 128, 64, ""), (1, 1, 1, ""), (1, 37, 300, ""), (131, 1, 17, ""),
          (97, 113, 257, ""), (64, 48, 80, "a transposed"), (50, 70, 33, "b transposed"), (33, 29, 65, "both transposed"),
          (40, 36, 70, "a row-padded"), (45, 20, 50, "b every other row")]
N_RANDOM_K = (2, 1, 1500)  # random K (the first in the top quarter), between these bounds
N_RANDOM_MN = (2, 1, 96)  # random M and N
ACC_SHAPE = (32, 32, 2048)
#: A config of tiles that are not square, and a C it cuts into 7 x 1 of them: the default config's tiles
#: are square, so a grid or a (pid_m, pid_n) that swaps BLOCK_M and BLOCK_N passes everywhere else.
TALL_TILE = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
TALL_SHAPE = (100, 30, 40)  # C cut into 7 x 1 tall tiles by TALL_TILE
#: A config and a C of 3 x 3 tiles: a whole group of GROUP_M = 2 tile rows, then a last group of one. A group size
#: not clamped for the last group alone (min(num_pid_m, GROUP_M), without - first_pid_m) is right in a first
#: group and in a one-column C, which is all the other cases hold.
GROUPS_TILE = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2)
GROUPS_SHAPE = (48, 40, 24)
# the edge masks that out-of-bounds hints name
MASK = "(offs_m[:, None] < M) & (offs_n[None, :] < N) on the C tile, and k < K on the K slices of A and B"
# an fp16 accumulator, in either form: acc += tl.dot(a, b).to(fp16) rounds, acc = tl.dot(a, b, acc) raises
ACC_HINT = ("accumulate in fp32 (acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), then acc = tl.dot(a, b, acc) "
            "or acc += tl.dot(a, b), whose default out_dtype is fp32) and convert to fp16 only at the store; an "
            "fp16 accumulator rounds every partial sum")


def _inputs(M, N, K, layout, dtype, gen):
    a = (torch.randn(M, K, generator=gen, dtype=torch.float64) / math.sqrt(K)).to(dtype)
    b = torch.randn(K, N, generator=gen, dtype=torch.float64).to(dtype)
    a, b = a.to(mode.DEVICE), b.to(mode.DEVICE)
    if layout == "a row-padded":  # a_big[:, :K]: row stride K + 7
        return row_padded(a), padded(b)
    if layout == "b every other row":  # b_big[::2]: row stride 2N
        return padded(a), sliced_rows(b)
    a = a.t().contiguous().t() if "a " in layout or "both" in layout else padded(a)
    b = b.t().contiguous().t() if "b " in layout or "both" in layout else padded(b)
    return a, b


def _tolerance(dtype):
    if dtype == torch.float16:
        return 1e-2, 1e-2
    if dtype == torch.bfloat16:
        return 3e-2, 3e-2
    return (1e-4, 1e-4) if mode.INTERPRET else (2e-2, 2e-2)  # an fp32 tl.dot uses TF32 on a GPU


# ways of taking (pid_m, pid_n) from pid in the grouped order that leave tiles unwritten: (what, pid -> tile)
def _grouped(pid, num_m, num_n, group, *, clamp=True, n_op="//", m_op="%") -> tuple[int, int]:
    """(pid_m, pid_n) of program ``pid`` in the grouped order (``traffic.program_order``) written the ways learners
    get it wrong: the last group not clamped to the tile rows left (``clamp=False``), pid_n or pid_m taken with
    the other operator (``n_op="%"``, ``m_op="//"``)."""
    per_group = group * num_n
    first = pid // per_group * group
    size = min(num_m - first, group) if clamp else group
    within = pid % per_group
    pid_m = first + (within % size if m_op == "%" else within // size)
    pid_n = within // size if n_op == "//" else within % size
    return pid_m, pid_n


TILE_MODELS = (
    ("the last group of tile rows may be shorter than GROUP_M: group_size_m = min(num_pid_m - first_pid_m, "
     "GROUP_M), and pid_m, pid_n are taken with that size, not GROUP_M", dict(clamp=False)),
    ("pid_n is (pid % pids_per_group) // group_size_m, a division: with % it repeats the first columns "
     "of tiles and never reaches the others", dict(n_op="%")),
    ("pid_m is first_pid_m + (pid % pids_per_group) % group_size_m, a remainder: with // it runs past the "
     "group's rows", dict(m_op="//")),
)


def _unwritten_tiles(nan, bm, bn) -> set:
    """The (tile row, tile column) of every (bm, bn) tile wholly NaN in ``nan``; None where a tile is partly NaN."""
    M, N = nan.shape
    tiles = set()
    for i in range(-(-M // bm)):
        for j in range(-(-N // bn)):
            t = nan[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            if bool(t.all()):
                tiles.add((i, j))
            elif bool(t.any()):
                return None
    return tiles


def _tile_hint(out, expected, traces) -> str:
    """``attempt``'s ``trace_hint``: tiles of C stored by two programs while others were never stored. On a 2-D
    grid, the kernel read only program_id(0); on a 1-D one, (pid_m, pid_n) was taken from pid one of
    TILE_MODELS' ways when the tiles that model never reaches are the unwritten ones, for the tile the programs
    stored and some GROUP_M."""
    if not isinstance(out, torch.Tensor) or out.dim() != 2:
        return ""
    for tr, i in out_records(out, traces):
        if len(tr.launches) != 1:
            continue
        counts = tr.read_counts(i, kind="store").reshape(tuple(out.shape))
        if not ((counts == 0).any() and (counts > 0).any()):
            continue
        launch = tr.launches[0]
        if (launch.grid[1] > 1 or launch.grid[2] > 1) and (counts > 1).any():
            return (f"the grid is {launch.grid[:2] if launch.grid[2] == 1 else launch.grid}, but the kernel takes its "
                    "tile from tl.program_id(axis=0) alone, so the programs that differ only in the other axes "
                    "store the same tile and other tiles are never written. The grid is a 1-tuple, "
                    "(triton.cdiv(M, meta['BLOCK_M']) * triton.cdiv(N, meta['BLOCK_N']),)")
        owner = tr.owner_map(i, kind="store")
        rows, cols = np.nonzero(owner >= 0)
        progs = owner[rows, cols]
        bm = max(int(np.ptp(rows[progs == p])) + 1 for p in np.unique(progs))
        bn = max(int(np.ptp(cols[progs == p])) + 1 for p in np.unique(progs))
        bm, bn = 1 << (bm - 1).bit_length(), 1 << (bn - 1).bit_length()
        M, N = out.shape
        num_m, num_n = -(-M // bm), -(-N // bn)
        unwritten = _unwritten_tiles(torch.from_numpy(counts == 0), bm, bn)
        if num_m * num_n != launch.num_programs or not unwritten:
            continue  # not whole tiles, or not a program a tile: a grid or mask mistake, which diagnose names
        twice = ("some tiles were stored by two programs and others by none" if (counts > 1).any() else
                 "some programs stored nothing (their tile lay outside C) and some tiles were never written")
        # the launch's own GROUP_M first: at 2 x 2 tiles an unclamped group of 8 and a pid_n by % with groups of 1
        # miss the same tiles
        own = launch.arg("GROUP_M")
        groups = ([own] if isinstance(own, int) and own > 0 else []) + [g for g in (1, 2, 4, 8) if g != own]
        for group in groups:
            for what, how in TILE_MODELS:
                reached = {_grouped(pid, num_m, num_n, group, **how) for pid in range(num_m * num_n)}
                missing = {(r, c) for r in range(num_m) for c in range(num_n)} - reached
                if missing == unwritten:
                    return f"{twice} ({len(missing)} of the {num_m * num_n} tiles): {what}"
        return (f"{twice} ({len(unwritten)} of the {num_m * num_n} tiles), though the grid has a program for each "
                "tile: the mapping from pid to (pid_m, pid_n) misses some tiles. Check it against the grouped order")
    return ""


def _diagnose(a, b, layout):
    def hint(o, e, wrong):
        M, N = o.shape
        nan = torch.isnan(o)
        if nan.any():
            transposed = _transposed_store_hint(o, e)
            if transposed:
                return transposed
            rows, cols = nan.all(dim=1), nan.all(dim=0)
            if rows.any() and not rows.all():
                return (f"rows from {int(rows.nonzero()[0])} on were never written: launch "
                        "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs and mask rows < M on the edge tile")
            if cols.any() and not cols.all():
                return (f"columns from {int(cols.nonzero()[0])} on were never written: launch "
                        "cdiv(N, BLOCK_N) tiles across N and map the program id to (pid_m, pid_n) correctly")
            return "some tiles were never written: check the grid and how pid maps to (pid_m, pid_n)"
        ad, bd = a.double().cpu(), b.double().cpu()
        K = ad.shape[1]
        if bool((o == 0).all()) and bool((e != 0).any()) and K < 128:
            return (f"every value is 0: no K step added to acc. Here K = {K} is less than a BLOCK_K of 32 or more: "
                    "a loop over K // BLOCK_K steps runs none. Loop over tl.cdiv(K, BLOCK_K) steps, the last one "
                    "masked, and add each step's product to acc (acc = tl.dot(a, b, acc))")
        for bk in (16, 32, 64, 128):
            if K > bk and K % bk and torch.allclose(o, ad[:, : K - K % bk] @ bd[: K - K % bk], atol=1e-2, rtol=1e-2):
                return (f"the last, partial K block is missing: loop over cdiv(K, BLOCK_K) blocks and mask the loads "
                        f"with k < K (other=0.0), so the {K % bk} leftover columns count")
        if K > 16:  # the K loop stops early: a hard-coded trip count, or a bound computed from something else
            for k0 in range(16, K, 16):
                if torch.allclose(o, ad[:, :k0] @ bd[:k0], atol=1e-2, rtol=1e-2):
                    return (f"only the first {k0} of K={K} columns count: the K loop stops early (a hard-coded "
                            "trip count?). Loop over tl.cdiv(K, BLOCK_K) blocks and mask the last one")
        step = _k_step_hint(a, b, o)
        if step:
            return step
        if layout:
            return ("a strided input (transposed, or a slice of a wider tensor) is wrong while contiguous ones pass: "
                    "index with both strides, a_ptr + rows * stride_am + ks * stride_ak, passing a.stride(0) and "
                    "a.stride(1) (a transposed tensor has stride_am == 1; a slice has stride_am > K)")
        for bk in (16, 32, 64, 128):
            last = (K - 1) // bk * bk
            if K > bk and torch.allclose(o, ad[:, last:] @ bd[last:], atol=1e-2, rtol=1e-2):
                return "only the last K step counts: accumulate with acc += tl.dot(a, b), not acc = tl.dot(a, b)"
            if K > bk and torch.allclose(o, ad[:, :bk] @ bd[:bk], atol=1e-2, rtol=1e-2):
                return ("only the first K step counts: accumulate, and advance both pointer blocks along K each step, "
                        "a_ptrs += BLOCK_K * stride_ak and b_ptrs += BLOCK_K * stride_bk")
        return (f"no known mistake fits; what the grader sees: {describe_wrong(o, e, wrong)}. Are a's and b's "
                "strides passed in the order the kernel takes them (am, ak, bk, bn)?")
    return hint


def _transposed_store_hint(o, e) -> str:
    """C stored with its two strides swapped (element (m, n) at n * stride_cm + m * stride_cn): of the positions
    that one element alone lands on, the written ones hold that element."""
    M, N = e.shape
    if M < 2 or N < 2:
        return ""
    m, n = torch.meshgrid(torch.arange(M), torch.arange(N), indexing="ij")
    idx = (n * N + m).reshape(-1)  # a contiguous C: stride_cm = N, stride_cn = 1, swapped
    inside = idx < M * N
    once = torch.bincount(idx[inside], minlength=M * N) == 1
    keep = inside.clone()
    keep[inside] = once[idx[inside]]
    flat, want = o.detach().double().cpu().reshape(-1), e.double().cpu().reshape(-1)
    written = keep & ~torch.isnan(flat[idx.clamp(max=M * N - 1)])
    if int(written.sum()) < max(4, M * N // 4):
        return ""
    if torch.allclose(flat[idx[written]], want[written], atol=1e-2, rtol=1e-2):
        return ("C is stored with its strides swapped: element (m, n) went to n * stride_cm + m * stride_cn. Store "
                "at c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, with stride_cm = c.stride(0)")
    return ""


def _stepped(t, k_dim: int, bk: int):
    """``t`` (A if ``k_dim`` is 1, B if 0) as a kernel reads it whose pointers advance along K by BLOCK_K
    elements a step instead of ``BLOCK_K * stride_k``: what K step ``s`` reads at ``kk`` lies ``s * bk``
    elements on from the slice's start, whatever the stride. Read from ``t``'s own storage (its gaps
    included), as the kernel does; what lies outside the storage reads as 0 (the tracer stops that)."""
    flat = torch.empty(0, dtype=t.dtype).set_(t.detach().cpu().untyped_storage()).double()
    K = t.shape[k_dim]
    k = torch.arange(K)
    s, kk = k // bk, k % bk
    other = torch.arange(t.shape[1 - k_dim])
    along_k = kk * t.stride(k_dim) + s * bk
    off = t.storage_offset() + (other[:, None] * t.stride(1 - k_dim) + along_k[None, :])  # (M, K) or (N, K)
    inside = (off >= 0) & (off < flat.numel())
    vals = torch.where(inside, flat[off.clamp(0, max(flat.numel() - 1, 0))], torch.zeros((), dtype=torch.float64))
    return vals if k_dim == 1 else vals.t()


def _k_step_hint(a, b, o) -> str:
    """A K loop whose pointers step by BLOCK_K elements, not BLOCK_K * stride: right only where the stride
    along K is 1 (A's rows contiguous), wrong on a transposed A or on B, whose K stride is its row stride."""
    ad, bd = a.double().cpu(), b.double().cpu()
    K = ad.shape[1]
    for bk in (16, 32, 64, 128):
        if K <= bk:
            continue
        sa, sb = _stepped(a, 1, bk), _stepped(b, 0, bk)
        a_off, b_off = not torch.equal(sa, ad), not torch.equal(sb, bd)
        for which, (x, y) in (("a", (sa, bd)), ("b", (ad, sb)), ("a and b", (sa, sb))):
            if (("a" in which) <= a_off) and (("b" in which) <= b_off) \
                    and torch.allclose(o, x @ y, atol=1e-2, rtol=1e-2):
                steps = [f"{p}_ptrs += BLOCK_K * stride_{p}k" for p in ("a", "b") if p in which.split(" and ")]
                return (f"the K step: {' and '.join(steps)}, not += BLOCK_K. A step of BLOCK_K elements moves "
                        "BLOCK_K columns only where the stride along K is 1 (a row-major A); on a transposed A, "
                        "or on B, whose K stride is its row stride, it lands elsewhere")
    return ""


STRIDES = {"a": "offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak, with a.stride(0) and a.stride(1) passed in "
                "that order",
           "b": "offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn, with b.stride(0) and b.stride(1) passed in "
                "that order"}


def _oob_hint(bad, hint):
    first = next((o for o in bad if o.kind == "store"), bad[0])
    if first.kind == "store" and first.derived:
        return (f"your kernel stores past the end of {first.tensor} on an edge tile: mask the store with both "
                "edges, (offs_m[:, None] < M) & (offs_n[None, :] < N)")
    if first.kind == "load" and first.derived and first.tensor in ("a", "b"):
        t = first.tensor
        top = max(int(o.offsets.max()) for o in bad if o.tensor == t and o.kind == "load")
        if top >= 8 * first.numel:
            step = "a_ptrs += BLOCK_K * stride_ak" if t == "a" else "b_ptrs += BLOCK_K * stride_bk"
            return (f"your kernel loads far past the end of {t} (offset {top}; it has {first.numel} elements), "
                    "further than any missing mask reaches: a stride is in the wrong place. The K step is "
                    f"{step}, the stride along K, and the offsets are " + STRIDES[t])
        return (f"your kernel loads past the end of {t}: mask every load on both of its edges, rows past M (or "
                "columns past N) and the ragged last K block, with other=0.0 so the masked lanes add nothing. In step "
                "k the slice's columns are k * BLOCK_K + offs_k, so mask offs_k < K - k * BLOCK_K (offs_k < K alone "
                "lets every lane through once K > BLOCK_K). If the masks are right, check the strides: the offsets "
                "are " + STRIDES[t])
    return ""


def _acc_case(mod, gen):
    """fp16 inputs, positive values, K=2048: each result is a sum of thousands of terms near 512, where
    fp16 steps by 0.5; an fp32 accumulator is off by at most one rounding of the output."""
    M, N, K = ACC_SHAPE
    a = padded(torch.rand(M, K, generator=gen, dtype=torch.float64).to(torch.float16).to(mode.DEVICE))
    b = padded(torch.rand(K, N, generator=gen, dtype=torch.float64).to(torch.float16).to(mode.DEVICE))

    def hint(o, e, wrong):
        return f"digits lost in a long sum: {ACC_HINT}"
    return _attempt(f"M={M} N={N} K={K} float16 (positive values: fp16 accumulation loses digits)", mod.matmul,
                    (a, b), a.double() @ b.double(), dtype=torch.float16, atol=0.0, rtol=1.2e-3, diagnose=hint,
                    oob_hint=_oob_hint, mask=MASK)


def _dot_acc_mismatch(exc) -> bool:
    """Whether ``exc``, or an exception along its chain (``core.exception_chain``: Triton's interpreter and
    compiler wrap it), is ``tl.dot``'s own check that ``acc`` has the dot's shape and out_dtype: what
    ``acc = tl.dot(a, b, acc)`` raises with an fp16 ``acc`` (the out_dtype is fp32 by default). A bare
    ``AssertionError`` from a frame named ``dot`` in Triton whose line tests ``acc``."""
    for e in exception_chain(exc):
        if isinstance(e, AssertionError) and not str(e):
            for f in traceback.extract_tb(e.__traceback__):
                if f.name == "dot" and "triton" in f.filename.replace("\\", "/") and "acc" in (f.line or "acc"):
                    return True
    return False


def _error_hint(exc, hint):
    """``attempt``'s ``error_hint``: what a raised error means when it is ``tl.dot``'s check of an fp16
    accumulator (``acc = tl.dot(a, b, acc)``, the lesson's form); the error case alone says only where."""
    if not _dot_acc_mismatch(exc):
        return ""
    where = hint.partition("says where")[2].lstrip(": ")  # core's hint names the line, where it knows it
    return ("tl.dot(a, b, acc) checks that acc has the dot's out_dtype, fp32 by default, and your accumulator is "
            f"not fp32 (an fp16 acc = tl.zeros(..., dtype=tl.float16)?): {ACC_HINT}"
            + (f". It raised at {where}" if where else ""))


#: What steps that load nothing mean here: a K loop past the last block of K.
IDLE_HINT = ("the K loop runs past K: it takes tl.cdiv(K, BLOCK_K) steps, for k in range(0, tl.cdiv(K, BLOCK_K)) "
             "(range(K) takes K of them, and a number of steps typed in fits one K only). The steps past the last "
             "block load nothing, every lane masked off, and still take their time")


def _attempt(label, fn, args, expected, **kwargs):
    """``core.attempt`` with this lesson's ``error_hint``, ``trace_hint`` and ``idle``."""
    return attempt(label, fn, args, expected, error_hint=_error_hint, trace_hint=_tile_hint, idle=IDLE_HINT, **kwargs)


def _fixed(mod, dtype, gen, shapes):
    for M, N, K, layout in shapes:
        label = f"M={M} N={N} K={K} {str(dtype)[6:]}" + (f" ({layout})" if layout else "")
        a, b = _inputs(M, N, K, layout, dtype, gen)
        atol, rtol = _tolerance(dtype)
        yield _attempt(label, mod.matmul, (a, b), a.double() @ b.double(), dtype=dtype, atol=atol, rtol=rtol,
                       diagnose=_diagnose(a, b, layout), oob_hint=_oob_hint, mask=MASK)


def _random(mod, dtype, gen):
    seed, ks = random_sizes(*N_RANDOM_K)
    _, ms = random_sizes(*N_RANDOM_MN, seed=seed + 1)
    _, ns = random_sizes(*N_RANDOM_MN, seed=seed + 2)
    atol, rtol = _tolerance(dtype)
    for M, N, K in zip(ms, ns, ks):
        a, b = _inputs(M, N, K, "", dtype, gen)
        yield _attempt(seeded(f"M={M} N={N} K={K} {str(dtype)[6:]}", seed), mod.matmul, (a, b),
                       a.double() @ b.double(), dtype=dtype, atol=atol, rtol=rtol,
                       diagnose=_diagnose(a, b, ""), oob_hint=_oob_hint, mask=MASK)


def _tall_tile_case(mod, dtype, gen):
    """A config whose tiles are not square (``TALL_TILE``) on a C wider than tall and taller than its tiles: a
    grid that counts M's tiles with BLOCK_N (or pid_m, pid_n mapped with the blocks swapped) leaves tiles out,
    which square tiles hide."""
    M, N, K = TALL_SHAPE
    a, b = _inputs(M, N, K, "", dtype, gen)
    atol, rtol = _tolerance(dtype)

    def hint(o, e, wrong):
        return (f"with BLOCK_M = {TALL_TILE['BLOCK_M']} and BLOCK_N = {TALL_TILE['BLOCK_N']} some tiles of C were "
                "wrong or never written, though square tiles pass: the grid is cdiv(M, meta['BLOCK_M']) * "
                "cdiv(N, meta['BLOCK_N']), and pid_m counts BLOCK_M rows, pid_n BLOCK_N columns")
    label = (f"M={M} N={N} K={K} {str(dtype)[6:]}, config BLOCK_M={TALL_TILE['BLOCK_M']} "
             f"BLOCK_N={TALL_TILE['BLOCK_N']} (tiles not square)")
    return _attempt(label, mod.matmul, (a, b), a.double() @ b.double(), kwargs=dict(config=dict(TALL_TILE)),
                    dtype=dtype, atol=atol, rtol=rtol, diagnose=hint, oob_hint=_oob_hint, mask=MASK)


def _groups_case(mod, dtype, gen):
    """``GROUPS_TILE`` on ``GROUPS_SHAPE``: a last group shorter than GROUP_M after a whole one."""
    M, N, K = GROUPS_SHAPE
    a, b = _inputs(M, N, K, "", dtype, gen)
    atol, rtol = _tolerance(dtype)
    label = (f"M={M} N={N} K={K} {str(dtype)[6:]}, config BLOCK_M={GROUPS_TILE['BLOCK_M']} "
             f"BLOCK_N={GROUPS_TILE['BLOCK_N']} GROUP_M={GROUPS_TILE['GROUP_M']} (a shorter last group after a whole one)")
    return _attempt(label, mod.matmul, (a, b), a.double() @ b.double(), kwargs=dict(config=dict(GROUPS_TILE)),
                    dtype=dtype, atol=atol, rtol=rtol, diagnose=_diagnose(a, b, ""), oob_hint=_oob_hint, mask=MASK)


def grade(mod):
    gen = torch.Generator().manual_seed(0)
    first, *others = mode.float_dtypes()
    # one plain shape, then the random ones (a hard-coded bound fails early), then the awkward ones
    yield from _fixed(mod, first, gen, SHAPES[:1])
    yield from _random(mod, first, gen)
    yield from _fixed(mod, first, gen, SHAPES[1:])
    yield _tall_tile_case(mod, first, gen)
    yield _groups_case(mod, first, gen)
    for dtype in others:
        if dtype == torch.float16:
            yield _acc_case(mod, gen)
        yield from _fixed(mod, dtype, gen, SHAPES)
    d = mode.DEVICE
    hint = "check shapes and dtypes before launching, and raise ValueError saying what to fix"
    yield refuses("mismatched inner dimensions raise ValueError", mod.matmul, torch.ones(3, 4, device=d),
                  torch.ones(5, 6, device=d), hint=hint)
    yield refuses("mismatched dtypes raise ValueError", mod.matmul, torch.ones(3, 4, device=d),
                  torch.ones(4, 6, device=d, dtype=torch.float16), hint=hint)
