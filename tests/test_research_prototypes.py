"""Research prototypes that have only been compiled (no GPU has run them yet): they still compile for an
H100/H200 (sm_90a) with the installed Triton, as their probes will need, and within the registers they were
built for. A change in Triton's Gluon API shows here before a GPU session is spent on it."""

import torch

from research.decode import gluon_decode


def test_the_gluon_decode_prototype_compiles_for_sm90_without_spills():
    shared, ptxas_line = gluon_decode.compile_for_sm90(torch.float16, 128, 16, 4, 64, 3)[:2]
    assert shared <= 227 * 1024, shared  # what an H100/H200 gives one program
    assert "0 bytes spill stores" in ptxas_line, ptxas_line


def test_the_gluon_backward_prototype_compiles_clean_for_sm90():
    """``research/hopper/gluon_backward.py`` at D 64, causal: no spills, no wgmma serialized by ptxas, and no
    write of a wgmma's register operand while that wgmma may run (the race ``wgmma_races.py`` finds)."""
    from research.hopper import gluon_backward

    summary = gluon_backward.ptxas_summary(gluon_backward.compile_for_sm90(torch.float16, 64, True).asm["ptx"])
    assert "spill stores/loads 0/0 bytes" in summary and "not serialized" in summary, summary
    assert summary.endswith("register-operand races: none"), summary
