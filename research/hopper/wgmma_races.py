"""Find, in a kernel's SASS for sm_90a, a wgmma's register operand rewritten while that wgmma may still run.

A ``wgmma`` whose left operand comes from registers (in SASS ``HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR8],
R24``: R88 to R91 hold this thread's part of the 64 x 16 operand) reads those registers while it runs, up to
the ``WARPGROUP.DEPBAR.LE gsb0, N`` that retires its group. PTX leaves a write to them before then undefined,
and ptxas neither keeps the registers apart nor warns (no C7514): on the H200 the int4 ping-pong kernel, whose
wait left a step's wgmma in flight while the next step's bytes were loaded into the same registers, gave wrong
sums that changed from call to call (``research/README.md``, "The int4 ping-pong on the H200"). Gluon's
``warpgroup_mma_wait(deps=...)`` did not change the SASS.

``races(sass)`` walks the SASS in address order from each such HGMMA: a group counts as retired by a DEPBAR
that leaves in flight no more groups than were committed after it (``gsb0`` closes a group); a branch back to
an address at or before the HGMMA is the loop going round, followed once, up to the HGMMA itself. A write of
one of the operand's registers before the group is retired is a race. The walk is linear: a forward branch is
taken as falling through, so a write on a path that skips it is still counted (a false alarm at worst).

    python research/hopper/wgmma_races.py K.cubin|K.sass   (prints each race, exits 1 if there is one)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_HGMMA_REG_A = re.compile(r"HGMMA\.(\d+)x(\d+)x(\d+)\.\S+\s+R\d+,\s+R(\d+),")
_DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s+0x([0-9a-f]+)")
_BRA = re.compile(r"\bBRA\s+(?:`\()?(0x[0-9a-f]+)")
#: opcodes that write no general register first (stores, barriers, branches, syncs, the MMAs' accumulators)
_NO_DEST = ("ST", "STS", "STG", "STL", "RED", "BAR", "BRA", "EXIT", "RET", "CALL", "SYNCS", "WARPGROUP", "HGMMA",
            "NOP", "MEMBAR", "FENCE", "DEPBAR", "WARPSYNC", "BSYNC", "BSSY", "UTMALDG", "UTMASTG", "UTMACCTL",
            "ERRBAR", "CCTL", "ARRIVES", "YIELD", "BPT", "UBLKCP", "USETMAXREG", "SETMAXREG")


def instructions(sass: str) -> list[tuple[int, str]]:
    """``(address, text)`` of each instruction of ``cuobjdump -sass`` output, the predicate kept in the text."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in _INS.finditer(sass)]


def _written(text: str) -> set[int]:
    """The general registers an instruction writes: its first operand, widened by a .64/.128/.WIDE suffix."""
    body = re.sub(r"^@!?U?P\w+\s+", "", text)
    op, _, rest = body.partition(" ")
    if op.split(".")[0] in _NO_DEST or not rest:
        return set()
    m = re.match(r"R(\d+)\b", rest.strip())
    if not m:
        return set()
    first = int(m.group(1))
    width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
    return set(range(first, first + width))


def races(sass: str) -> list[tuple[int, int, int, str]]:
    """``(HGMMA address, writer address, register, writer)`` for each write of an HGMMA's register operand
    before a DEPBAR retires the HGMMA's group; empty when there is none."""
    ins = instructions(sass)
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    found = []
    for i, (addr, text) in enumerate(ins):
        m = _HGMMA_REG_A.search(text)
        if not m:
            continue
        M, _, K = int(m.group(1)), int(m.group(2)), int(m.group(3))
        regs = set(range(int(m.group(4)), int(m.group(4)) + M * K // 2 // 128))  # 16-bit values, 2 a register
        newer = 0  # groups committed after this HGMMA's own
        own_closed = "gsb0" in text
        j, wrapped, steps = i + 1, False, 0
        while steps < 4 * len(ins):
            steps += 1
            if j >= len(ins):
                break
            a, t = ins[j]
            if j == i:  # round the loop back to the HGMMA: it issues again, the walk is done
                break
            if t.startswith("HGMMA") or " HGMMA" in t:
                if "gsb0" in t:
                    if own_closed:
                        newer += 1
                    else:
                        own_closed = True
            elif (d := _DEPBAR.search(t)) and own_closed and newer >= int(d.group(1), 16):
                break  # retired
            hit = _written(t) & regs
            if hit:
                found.append((addr, a, min(hit), t))
                break
            b = _BRA.search(t)
            if b and not wrapped and int(b.group(1), 16) <= addr and int(b.group(1), 16) in index:
                j, wrapped = index[int(b.group(1), 16)], True  # the loop goes round once more
                continue
            if b and not t.startswith("@"):  # an unconditional jump elsewhere: follow it if it goes forward
                target = int(b.group(1), 16)
                if target > a and target in index:
                    j = index[target]
                    continue
            j += 1
    return found


def sass_of(cubin: Path) -> str:
    """``cuobjdump -sass`` of a cubin, with the cuobjdump Triton's wheel carries."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout


def main(argv):
    path = Path(argv[0])
    text = path.read_text() if path.suffix == ".sass" else sass_of(path)
    found = races(text)
    for hg, at, reg, t in found:
        print(f"HGMMA at {hg:#06x}: R{reg} written at {at:#06x} before it is retired: {t}")
    print(f"{len(found)} race(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
