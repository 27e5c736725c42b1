"""``solutions.kernels.kv_cache.write``: a step's keys and values into the paged cache, as ``index_put_``
would, from the strided views of a fused QKV output, and never outside the cache; ``rope_write``: RoPE in
place and the same write in one launch."""

import pytest
import torch

from solutions.kernels import kv_cache, lean, rope
from tkcourse import mode

DEV = mode.DEVICE


def _case(B, T, H=2, D=16, page=4, pages=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, 3 * H, D, generator=g).half().to(DEV)  # q, k, v heads side by side, as a model's
    k, v = qkv[:, :, H:2 * H], qkv[:, :, 2 * H:]
    kc = torch.randn(pages, page, H, D, generator=g).half().to(DEV)
    vc = torch.randn(pages, page, H, D, generator=g).half().to(DEV)
    flat = torch.randperm(pages * page, generator=g)[:B * T].view(B, T)  # distinct cells
    return k, v, kc, vc, (flat // page).to(DEV), (flat % page).to(DEV)


@pytest.mark.parametrize("B,T", [(1, 1), (3, 1), (2, 5)])
def test_write_matches_index_put(B, T):
    k, v, kc, vc, page, slot = _case(B, T)
    want_k, want_v = kc.clone(), vc.clone()
    kv_cache.write_reference(k, v, want_k, want_v, page, slot)
    for _ in range(2):  # the first call launches through kernel[grid]; the second, the kept lean entry
        got_k, got_v = kc.clone(), vc.clone()
        kv_cache.write(k, v, got_k, got_v, page, slot)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


def test_a_page_or_slot_outside_the_cache_writes_nothing():
    k, v, kc, vc, page, slot = _case(3, 1)
    page[1, 0] = kc.shape[0]  # one past the last page
    slot[2, 0] = -1
    got_k, got_v = kc.clone(), vc.clone()
    kv_cache.write(k, v, got_k, got_v, page, slot)
    want_k, want_v = kc.clone(), vc.clone()
    kv_cache.write_reference(k[:1], v[:1], want_k, want_v, page[:1], slot[:1])  # only the first token lands
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)


@pytest.mark.parametrize("bad,match", [("shape", "k and v"), ("dtype", "share a dtype"), ("page", "page must be")])
def test_bad_input_names_the_argument(bad, match):
    k, v, kc, vc, page, slot = _case(2, 1)
    if bad == "shape":
        v = v[:, :, :1]
    elif bad == "dtype":
        kc = kc.float()
    else:
        page = page.int()
    with pytest.raises(ValueError, match=match):
        kv_cache.write(k, v, kc, vc, page, slot)


def _rope_case(B, T, Hq=4, H=2, D=16, page=4, pages=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, Hq + 2 * H, D, generator=g).half().to(DEV)  # a fused QKV output, as the model's
    q, k, v = qkv[:, :, :Hq], qkv[:, :, Hq:Hq + H], qkv[:, :, Hq + H:]
    kc = torch.randn(pages, page, H, D, generator=g).half().to(DEV)
    vc = torch.randn(pages, page, H, D, generator=g).half().to(DEV)
    flat = torch.randperm(pages * page, generator=g)[:B * T].view(B, T)
    cos, sin = rope.rope_tables(32, D, device=DEV)
    positions = torch.randint(0, 32, (B, T), generator=g).to(DEV)
    return qkv, q, k, v, kc, vc, cos, sin, positions, (flat // page).to(DEV), (flat % page).to(DEV)


# (2, 45): more tokens than one program takes in the interpreter (kv_cache.INTERPRET_TOKENS), the last
# program's block part empty
@pytest.mark.parametrize("B,T", [(1, 1), (3, 1), (2, 5), (2, 45)])
def test_rope_write_matches_rope_then_write(B, T):
    qkv, q, k, v, kc, vc, cos, sin, pos, page, slot = _rope_case(B, T)
    want_qkv, want_k, want_v = qkv.clone(), kc.clone(), vc.clone()
    Hq, H = q.shape[2], k.shape[2]
    kv_cache.rope_write_reference(want_qkv[:, :, :Hq], want_qkv[:, :, Hq:Hq + H], want_qkv[:, :, Hq + H:], cos, sin,
                                  pos, want_k, want_v, page, slot)
    rq, rk = rope.rope_reference(q, k, cos, sin, pos)
    assert torch.equal(want_qkv[:, :, :Hq], rq) and torch.equal(want_qkv[:, :, Hq:Hq + H], rk)  # the reference is RoPE
    for _ in range(2):  # the first call launches through kernel[grid]; the second, the kept lean entry
        x = qkv.clone()
        got_k, got_v = kc.clone(), vc.clone()
        kv_cache.rope_write(x[:, :, :Hq], x[:, :, Hq:Hq + H], x[:, :, Hq + H:], cos, sin, pos, got_k, got_v, page, slot)
        torch.testing.assert_close(x, want_qkv, atol=2e-3, rtol=0)  # q and k rotated in place, v untouched
        torch.testing.assert_close(got_k, want_k, atol=2e-3, rtol=0)  # the rotated k in its slot
        assert torch.equal(got_v, want_v)  # v copied as it is


def test_rope_write_outside_the_cache_still_rotates_but_writes_nothing():
    qkv, q, k, v, kc, vc, cos, sin, pos, page, slot = _rope_case(3, 1)
    page[1, 0] = kc.shape[0]
    slot[2, 0] = kc.shape[1]
    got_k, got_v = kc.clone(), vc.clone()
    x = qkv.clone()
    Hq, H = q.shape[2], k.shape[2]
    kv_cache.rope_write(x[:, :, :Hq], x[:, :, Hq:Hq + H], x[:, :, Hq + H:], cos, sin, pos, got_k, got_v, page, slot)
    rq, rk = rope.rope_reference(q, k, cos, sin, pos)
    torch.testing.assert_close(x[:, :, :Hq], rq, atol=2e-3, rtol=0)
    torch.testing.assert_close(x[:, :, Hq:Hq + H], rk, atol=2e-3, rtol=0)  # every token's k rotated
    want_k, want_v = kc.clone(), vc.clone()
    kv_cache.write_reference(rk[:1], v[:1], want_k, want_v, page[:1], slot[:1])  # only the first token lands
    torch.testing.assert_close(got_k, want_k, atol=2e-3, rtol=0)
    assert torch.equal(got_v, want_v)


def test_rope_write_bad_input_names_the_argument():
    qkv, q, k, v, kc, vc, cos, sin, pos, page, slot = _rope_case(2, 1)
    with pytest.raises(ValueError, match="positions"):
        kv_cache.rope_write(q, k, v, cos, sin, pos[:, :0], kc, vc, page, slot)
    with pytest.raises(ValueError, match="k and v"):
        kv_cache.rope_write(q, k, v[:, :, :1], cos, sin, pos, kc, vc, page, slot)
    with pytest.raises(ValueError, match="q"):
        kv_cache.rope_write(q.tolist(), k, v, cos, sin, pos, kc, vc, page, slot)


def test_pdl_is_asked_for_only_where_the_gpu_has_it():
    meta = lean.pdl_meta(DEV)
    if mode.INTERPRET:
        assert meta == {}  # the interpreter has no programmatic dependent launch
    else:
        assert meta == (dict(PDL=True, launch_pdl=True) if torch.cuda.get_device_capability()[0] >= 9 else {})
    assert lean.pdl_meta(DEV, on=False) == {}
