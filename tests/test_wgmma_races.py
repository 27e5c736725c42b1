"""``research/hopper/wgmma_races.py``, the SASS check for a wgmma whose register operand is rewritten while
it may still run, on hand-made SASS: the race it must find (the next step's bytes loaded into the operand's
registers after a wait that leaves the step's group in flight, as the int4 ping-pong did), and what it must
let pass (the same load after a wait that retires the group; a write of other registers; a group retired by
a later wait)."""

from research.hopper.wgmma_races import races

HEAD = """
        /*0100*/                   LDS.U16 R88, [R17+UR9+0x21000] ;
        /*0110*/                   WARPGROUP.ARRIVE ;
        /*0120*/                   HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR12], R24 ;
        /*0130*/                   HGMMA.64x128x16.F32.BF16 R24, R92, gdesc[UR12], R24, gsb0 ;
"""
LOOP_BACK = """
        /*0150*/              @P1 BRA 0x100 ;
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def test_a_load_into_the_operand_after_a_wait_that_leaves_it_in_flight_is_a_race():
    sass = HEAD + "        /*0140*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;\n" + LOOP_BACK
    found = races(sass)
    assert found and {(hg, at) for hg, at, _, _ in found} >= {(0x120, 0x100)}
    assert all(reg in range(88, 96) for _, _, reg, _ in found)


def test_the_same_load_after_a_wait_that_retires_the_group_is_no_race():
    assert races(HEAD + "        /*0140*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n" + LOOP_BACK) == []


def test_writes_of_other_registers_and_a_later_group_are_told_apart():
    sass = (HEAD + """
        /*0140*/                   IMAD.MOV.U32 R40, RZ, RZ, R41 ;
        /*0150*/                   HGMMA.64x128x16.F32.BF16 R24, R100, gdesc[UR12], R24, gsb0 ;
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0170*/                   LDS.128 R88, [R3] ;
        /*0180*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0190*/                   IMAD.WIDE R100, R2, 0x2, R4 ;
""")
    found = races(sass)  # R88's group is retired by the first wait (one newer group); R100's is still running
    assert [(hg, at) for hg, at, _, _ in found] == []
    sass_bad = sass.replace("LDS.128 R88, [R3]", "LDS.128 R100, [R3]")
    assert [(hg, at) for hg, at, _, _ in races(sass_bad)] == [(0x150, 0x170)]
