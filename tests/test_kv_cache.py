"""``solutions.kernels.kv_cache.write``: a step's keys and values into the paged cache, as ``index_put_``
would, from the strided views of a fused QKV output, and never outside the cache."""

import pytest
import torch

from solutions.kernels import kv_cache
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
