"""The capstone model (``solutions/llm.py``): the course's kernels against the torch reference, on a
tiny random model in Triton's interpreter (or compiled, on a GPU).

Two layers of ``Config.tiny()``'s shapes keep the file short; fp32 wherever the comparison is the
kernels' maths (the interpreter has no bf16, and fp32 leaves argmax ties no room), fp16 for int4
(the int4 kernel takes fp16 or bf16 activations).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch

from solutions import llm
from tkcourse import mode

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dataclasses.replace(llm.Config.tiny(), n_layers=2)
DEVICE = mode.DEVICE
#: Course against torch in fp32: the same maths summed in another order (tl.dot's tiles, the online
#: softmax of FlashAttention), a few ulps of logits of size about 1. TF32 on a GPU rounds inputs to
#: 10-bit mantissas: a looser bound there.
ATOL = 1e-4 if mode.INTERPRET else 2e-2
#: Greedy tokens must agree wherever the reference's best logit leads the second by more than this
#: (well above ATOL): a smaller lead is a near-tie, which either path may break its own way.
MARGIN = 10 * ATOL if mode.INTERPRET else 5e-2


@pytest.fixture(scope="module")
def weights():
    return llm.random_weights(CONFIG, torch.float32, DEVICE, seed=1)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(2)
    return torch.randint(0, CONFIG.vocab, (2, 12), generator=g).to(DEVICE)


def test_encode_decode_round_trip():
    for text in ["def f(x):\n    return x + 1\n", "héllo wörld ✓ 日本語 🐍", ""]:
        ids = llm.encode(text)
        assert all(0 <= i < 256 for i in ids)
        assert llm.decode(ids) == text
    assert len(llm.encode("é")) == 2
    assert llm.decode(llm.encode("日")[:2]) == "\ufffd"  # a character cut in half: the replacement character
    assert llm.decode(torch.tensor(llm.encode("ok"))) == "ok"


def test_course_logits_match_torch(weights):
    tokens = torch.randint(0, CONFIG.vocab, (2, 40), generator=torch.Generator().manual_seed(3)).to(DEVICE)
    want = llm.logits(weights, tokens, kernels="torch")
    got = llm.logits(weights, tokens, kernels="course")
    assert got.shape == (2, 40, CONFIG.vocab) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    assert llm.logits(weights, "x = 1", kernels="course").shape == (1, 5, CONFIG.vocab)  # a text is its bytes


def _agree_where_clear(got, want, got_logits, want_logits):
    """Greedy tokens equal at every step up to the first near-tie of the reference, and the logits
    close up to the first step whose tokens differ (after it, the two paths read different tokens)."""
    top2 = want_logits.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > MARGIN  # (B, steps)
    for b in range(want.shape[0]):
        n = int(clear[b].long().cumprod(0).sum())  # steps before the first near-tie
        if mode.INTERPRET:  # fp32 without TF32: the seeds here give no near-tie early on
            assert n >= 8, f"sequence {b}: a near-tie at step {n}; pick another seed"
        assert torch.equal(got[b, :n], want[b, :n]), (got[b], want[b])
        same = int((got[b] == want[b]).long().cumprod(0).sum())
        torch.testing.assert_close(got_logits[b, :same + 1], want_logits[b, :same + 1], rtol=0, atol=ATOL)


def test_greedy_tokens_and_kv_cache(weights, prompts):
    """Course and torch pick the same greedy tokens; each decode step's logits (the prefill, then one
    token a step from the KV cache) equal the teacher-forced logits of the same positions."""
    n = 16
    want, want_logits = llm.generate(weights, prompts, n, kernels="torch", return_logits=True)
    got, got_logits = llm.generate(weights, prompts, n, kernels="course", return_logits=True)
    assert got.shape == (2, n) and got_logits.shape == (2, n, CONFIG.vocab)
    _agree_where_clear(got, want, got_logits, want_logits)
    T = prompts.shape[1]
    for kernels, tokens, step_logits in (("course", got, got_logits), ("torch", want, want_logits)):
        full = llm.logits(weights, torch.cat([prompts, tokens[:, :-1]], 1), kernels=kernels)
        torch.testing.assert_close(step_logits, full[:, T - 1:], rtol=0, atol=ATOL)  # the cache is right


def test_int4_close_to_dequantized_torch():
    """int4 weights: the course's int4 kernel against torch on the dequantized weights, in fp16."""
    w = llm.random_weights(CONFIG, torch.float16, DEVICE, seed=4)
    tokens = torch.randint(0, CONFIG.vocab, (1, 24), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    want = llm.logits(w, tokens, kernels="torch", int4=True)
    got = llm.logits(w, tokens, kernels="course", int4=True)
    # fp16 activations rounded at each of the ~10 ops a layer, in a different order: logits of size ~4
    torch.testing.assert_close(got, want, rtol=0, atol=3e-2)
    assert (want - llm.logits(w, tokens, kernels="torch")).abs().max() > 0.1  # the weights were quantized
    toks, lg = llm.generate(w, tokens[:, :8], 3, kernels="torch", int4=True, return_logits=True)
    top2 = lg.topk(2, dim=-1).values
    clear = int(((top2[..., 0] - top2[..., 1]) > 0.1).long().cumprod(1).sum())
    assert torch.equal(llm.generate(w, tokens[:, :8], 3, kernels="course", int4=True)[0, :clear], toks[0, :clear])


def test_save_load_round_trip(tmp_path, weights):
    path = tmp_path / "tiny.pt"
    llm.save(path, CONFIG, weights)
    _, back = llm.load(path, device=DEVICE)
    assert back.config == CONFIG
    sd, sd2 = weights.state_dict(), back.state_dict()
    assert sd.keys() == sd2.keys()
    for k in sd:
        assert torch.equal(sd[k], sd2[k]), k
    assert llm.load(path, dtype=torch.float16)[1].dtype == torch.float16
    torch.save({"hello": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a"):
        llm.load(tmp_path / "other.pt")


def test_errors(weights):
    long = [1] * (CONFIG.max_seq - 3)
    with pytest.raises(ValueError, match="max_seq"):
        llm.generate(weights, long, 4, kernels="torch")
    with pytest.raises(ValueError, match="max_seq"):
        llm.logits(weights, [1] * (CONFIG.max_seq + 1), kernels="torch")
    with pytest.raises(ValueError, match="kernels"):
        llm.logits(weights, [1, 2], kernels="triton")
    with pytest.raises(ValueError, match="max_new_tokens"):
        llm.generate(weights, [1, 2], 0)
    with pytest.raises(ValueError, match="prompt"):
        llm.generate(weights, [], 2)
    with pytest.raises(ValueError, match="outside"):
        llm.logits(weights, [CONFIG.vocab], kernels="torch")
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        llm.logits(weights, [1, 2], int4=True)
    odd = dataclasses.replace(CONFIG, d_model=192, n_layers=1)
    with pytest.raises(ValueError, match="d_model"):
        llm.logits(llm.random_weights(odd, torch.float16), [1, 2], int4=True)
    with pytest.raises(ValueError, match="n_kv_heads"):
        dataclasses.replace(CONFIG, n_kv_heads=3).check()


def test_train_tiny_smoke(tmp_path):
    """``research/llm/train_tiny.py --steps 2 --tiny``: two steps of training on a CPU, saved, loaded."""
    spec = importlib.util.spec_from_file_location("train_tiny", ROOT / "research" / "llm" / "train_tiny.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    out = tmp_path / "tiny.pt"
    losses = train.main(["--steps", "2", "--tiny", "--out", str(out), "--sample-tokens", "8"])
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    _, w = llm.load(out)
    assert w.dtype == torch.float16 and w.config.vocab == 256


# ---- the learner's kernels in the model (``swap``), the shipped model, the recorded run ----
def test_swap_calls_the_given_function_and_restores_the_library(weights):
    """A swapped piece runs in place of the library's (a kernel planted 2x too large moves the
    logits), and leaving the block, even by an exception, puts the library's back."""
    from solutions.kernels import rmsnorm as k_rmsnorm

    ids = torch.tensor([llm.encode("ab\ncd")], device=DEVICE)
    base = llm.logits(weights, ids, kernels="course")
    calls = []

    def doubled(x, w, eps=1e-6, residual=None):
        calls.append(residual is not None)
        out = k_rmsnorm.rmsnorm(x, w, eps, residual=residual)
        return (out[0] * 2, out[1]) if residual is not None else out * 2

    with llm.swap(rmsnorm=doubled):
        assert set(llm.swapped()) == {"rmsnorm"}
        moved = llm.logits(weights, ids, kernels="course")
    assert calls and True in calls and False in calls  # with the residual and without (the first norm)
    assert (moved - base).abs().max() > 1e-2
    with pytest.raises(RuntimeError), llm.swap(rmsnorm=doubled):
        raise RuntimeError("a learner's kernel failing inside the block")
    assert llm.swapped() == {}
    torch.testing.assert_close(llm.logits(weights, ids, kernels="course"), base, atol=0, rtol=0)
    # the torch path, the reference, never changes
    with llm.swap(rmsnorm=doubled):
        torch.testing.assert_close(llm.logits(weights, ids, kernels="torch"),
                                   llm.logits(weights, ids, kernels="torch"), atol=0, rtol=0)


def test_swap_refuses_unknown_pieces_and_non_functions():
    with pytest.raises(ValueError, match="no piece named rms_norm"), llm.swap(rms_norm=print):
        pass
    with pytest.raises(ValueError, match="matmul must be a function"), llm.swap(matmul=3):
        pass
    assert llm.swapped() == {}


def test_swapped_lesson_kernels_give_the_same_tokens(weights):
    """The lessons' own kernels (the references of lessons 03, 06 and 09) swapped in: the tokens of the
    library's. Lesson 06's kernel takes as many K/V heads as query heads: swap repeats them."""
    from solutions import decode_attention, flash_attention, matmul, rmsnorm

    seen = []

    def attention_forward(q, k, v, causal=False):
        seen.append((q.shape[1], k.shape[1]))
        return flash_attention.attention_forward(q, k, v, causal=causal)

    expected = llm.generate(weights, "abc", 3, kernels="course")
    with llm.swap(rmsnorm=rmsnorm.rmsnorm, matmul=lambda a, b: matmul.matmul(a, b, llm.MATMUL_CONFIG),
                  attention_forward=attention_forward, decode_attention=decode_attention.decode_attention):
        got = llm.generate(weights, "abc", 3, kernels="course")
    assert torch.equal(got, expected)
    assert seen and all(hq == hk == CONFIG.n_heads for hq, hk in seen)


def test_the_shipped_model_is_trained_and_loads():
    """``load()`` reads the shipped model: (config, weights), the tiny config, and weights that predict
    Python: on a line of the standard library's style its loss is far below a random model's
    (ln 256 = 5.5 nats a byte) and its greedy text is readable ASCII."""
    config, w = llm.load(dtype=torch.float32)
    assert config == llm.Config.tiny() and w.config == config
    text = "import os\nimport sys\n\n\ndef main(argv=None):\n    if argv is None:\n        argv = sys.argv[1:]\n"
    ids = torch.tensor([llm.encode(text)])
    lg = llm.logits(w, ids, kernels="torch")
    loss = torch.nn.functional.cross_entropy(lg[0, :-1], ids[0, 1:]).item()
    assert loss < 1.5, f"{loss:.2f} nats a byte: the shipped weights are not the trained ones"
    out = llm.decode(llm.generate(w, 'def read_file(path):\n    """', 40, kernels="torch")[0].tolist())
    assert out.isascii() and sum(c.isalpha() for c in out) > 20, out


def test_the_recorded_run_matches_its_schema_and_a_broken_one_is_named(tmp_path):
    from tkcourse import bench
    from tkcourse.bench import RecordsFormatError

    run = bench.load_model_run()
    assert run is not None and {r["path"] for r in run["rows"]} >= {"course", "torch.compile", "course int4"}
    assert run["provenance"]["gpu"].startswith("NVIDIA H200")
    assert bench.load_model_run(tmp_path / "none.json") is None
    bad = dict(run, rows=[dict(run["rows"][0], tok_s="fast")])
    (tmp_path / "bad.json").write_text(__import__("json").dumps(bad))
    with pytest.raises(RecordsFormatError, match=r"rows/0/tok_s"):
        bench.load_model_run(tmp_path / "bad.json")
    (tmp_path / "cut.json").write_text('{"rows": [')
    with pytest.raises(RecordsFormatError, match="not valid JSON"):
        bench.load_model_run(tmp_path / "cut.json")


def test_step_bytes_adds_up_to_the_recorded_runs_bytes():
    """``step_bytes`` by piece: the recorded run's GB a step (computed by the same formula there) at
    batch 1 and 8, and int4's quarter of the projections plus one scale a group."""
    from tkcourse import bench

    big = llm.Config.llama3_8b()
    rows = {(r["path"], r["batch"]): r for r in bench.load_model_run()["rows"]}
    for B in (1, 8):
        assert sum(llm.step_bytes(big, B, 128 + 128).values()) / 1e9 == pytest.approx(rows["course", B]["gb_step"])
        assert sum(llm.step_bytes(big, B, 128 + 128, int4=True).values()) / 1e9 == pytest.approx(
            rows["course int4", B]["gb_step"])
    b16, b4 = llm.step_bytes(big), llm.step_bytes(big, int4=True)
    n, k = 2 * big.ffn_dim, big.d_model
    assert b16["gate + up projection"] == big.n_layers * n * k * 2
    assert b4["gate + up projection"] == big.n_layers * (n * k / 2 + n * k / llm.GROUP_SIZE * 2)
    assert llm.step_bytes(big, 4, 1000)["KV cache"] == 8 * llm.step_bytes(big, 1, 500)["KV cache"]


def test_kernels_are_sorted_into_pieces_by_name():
    names = {"int4_mm_kernel": "int4 matmul", "matmul_split_k_kernel": "matmul", "matmul_tma_kernel": "matmul",
             "sm90_xmma_gemm_bf16bf16_bf16f32": "matmul", "rmsnorm_kernel": "rmsnorm", "rope_kernel": "rope",
             "swiglu_kernel": "swiglu", "decode_split_kv": "decode attention", "decode_merge": "decode attention",
             "attn_fwd_gqa": "attention", "rope_write_kernel": "rope + cache write",
             "rmsnorm_pdl_kernel": "rmsnorm", "void at::native::index_put_kernel": llm.OTHER}
    assert {n: llm.piece_of(n) for n in names} == names
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA device"):
            llm.step_profile(llm.random_weights(CONFIG, torch.float32, "cpu"))


# ---- lesson 11's notebook ----
NOTEBOOK = ROOT / "notebooks" / "11_llm.ipynb"


def _cell(cell_id):
    import json

    return "".join(next(c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["id"] == cell_id)["source"])


def test_the_swap_cell_names_a_wrong_kernel_and_its_grader(capsys):
    """Lesson 11's swap cell with a learner's kernels of every kind: one off (rmsnorm, twice too large),
    one giving NaN (matmul), one that raises (attention), two right (the library's own calls). Each wrong
    one is called wrong, with its lesson's grader; the right ones are not; the cell never raises. A
    1-layer random model in fp16 keeps it quick (fp16 weights: the cell needs no second copy for int4)."""
    import types

    import tkcourse
    from solutions.kernels import decode_attention as k_decode
    from solutions.kernels import int4_matmul as k_int4
    from solutions.kernels import rmsnorm as k_rmsnorm
    from tkcourse.labels import Whose

    def doubled(x, w, eps=1e-6, residual=None):
        out = k_rmsnorm.rmsnorm(x, w, eps, residual=residual)
        return (out[0] * 2, out[1]) if residual is not None else out * 2

    def nan_matmul(a, b, **options):
        return torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype, device=a.device)

    def raising_attention(q, k, v, causal=False):
        raise RuntimeError("planted")

    learner = {
        "rmsnorm": types.SimpleNamespace(rmsnorm=doubled),
        "matmul": types.SimpleNamespace(matmul=nan_matmul),
        "flash_attention": types.SimpleNamespace(attention_forward=raising_attention),
        "decode_attention": types.SimpleNamespace(
            decode_attention=lambda *a: k_decode.decode_attention(*a, config=llm.DECODE_CONFIG)),
        "int4_matmul": types.SimpleNamespace(matmul=lambda x, p, s, g, **options: k_int4.matmul(x, p, s, g)),
    }
    for name, module in learner.items():
        module.__name__ = f"exercises.{name}"
    course = types.SimpleNamespace(size=tkcourse.size, exercise=learner.__getitem__,
                                   whose=lambda m: Whose(getattr(m, "__name__", f"exercises.{m}").split(".")[1], True,
                                                         "your exercise"))
    config = llm.Config(n_layers=1, d_model=128, n_heads=2, n_kv_heads=1, head_dim=64, ffn_dim=256, vocab=256,
                        max_seq=128)
    scope = dict(tkcourse=course, llm=llm, mode=mode, torch=torch, time=__import__("time"), DTYPE=torch.float16,
                 weights=llm.random_weights(config, torch.float16, DEVICE, seed=6), PROMPT="def f(x):\n")
    exec(_cell("63e261d8"), scope)
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.split("\n") if line and not line.startswith(" ")}
    assert "logits differ from the library's" in lines["rmsnorm"], out
    assert "NaN or infinite logits" in lines["matmul"], out
    assert "raised RuntimeError: planted" in lines["attention_forward"], out
    for piece, lesson, exercise in (("rmsnorm", "09", "rmsnorm"), ("matmul", "03", "matmul")):
        assert (f"{lines[piece]}\n{'':<18}wrong: your kernel computes something else than the library's; lesson "
                f"{lesson}'s grader says where: tkcourse.check.run(\"{exercise}\")") in out, out
    assert "lesson 06's grader says where and why: tkcourse.check.run(\"flash_attention\")" in out, out
    for piece in ("decode_attention", "int4_matmul"):
        assert "your kernel: the same tokens, logits within" in lines[piece], out
        assert f"{lines[piece]}\n{'':<18}wrong" not in out, out
    assert out.count("wrong:") == 2, out


def test_the_swap_cell_runs_no_reference_in_place_of_the_library(capsys):
    """A piece whose exercise is not the learner's yet (the reference stands in) is not run: the model already ran
    the library's kernels, so there is nothing to compare. Its line says so and why; nothing is generated."""
    import types

    import tkcourse
    from tkcourse.labels import Whose

    def never(*args, **kwargs):
        raise AssertionError("a reference standing in was run")

    pieces = {"rmsnorm": "rmsnorm", "matmul": "matmul", "flash_attention": "attention_forward",
              "decode_attention": "decode_attention", "int4_matmul": "matmul"}
    course = types.SimpleNamespace(size=tkcourse.size, exercise=lambda name: types.SimpleNamespace(
        __name__=f"solutions.{name}", **{pieces[name]: never}),
        whose=lambda m: Whose(getattr(m, "__name__", f"solutions.{m}").split(".")[1], False, "not done yet"))
    generated = []
    fake_llm = types.SimpleNamespace(**{k: getattr(llm, k) for k in ("MATMUL_CONFIG", "PIECES", "swap")},
                                     generate=lambda **kw: generated.append(kw), load=llm.load)
    scope = dict(tkcourse=course, llm=fake_llm, mode=mode, torch=torch, time=__import__("time"),
                 DTYPE=torch.float16, weights=None, PROMPT="def f(x):\n")
    exec(_cell("63e261d8"), scope)
    out = capsys.readouterr().out
    assert not generated, out
    for piece, exercise in (("rmsnorm", "rmsnorm"), ("matmul", "matmul"), ("attention_forward", "flash_attention"),
                            ("decode_attention", "decode_attention"), ("int4_matmul", "int4_matmul")):
        assert (f"{piece:<17} reference kernel: not run, nothing to compare (exercises/{exercise}.py is not done "
                "yet)") in out, out


def test_the_lessons_words_hold_in_the_recorded_run():
    """What lesson 11 says in words of the recorded H200 run and of the byte count: int4 reads about a
    quarter of the bytes, overtakes torch.compile at a smaller share of its floor; the MLP is most of a
    step's bytes; greedy tokens of random weights part after a few steps; the matmul decides the step;
    the shipped model has the layers the questions count."""
    from tkcourse import bench

    run = bench.load_model_run()
    rows = {(r["path"], r["batch"]): r for r in run["rows"]}
    for batch in (1, 8):
        int4, compiled = rows["course int4", batch], rows["torch.compile", batch]
        assert 0.2 < int4["gb_step"] / rows["course", batch]["gb_step"] < 0.3  # "a quarter of the bytes"
        assert int4["tok_s"] > compiled["tok_s"] and int4["floor_pct"] < compiled["floor_pct"]
    big = llm.Config.llama3_8b()
    parts, parts4 = llm.step_bytes(big, 1, 256), llm.step_bytes(big, 1, 256, int4=True)
    assert 3.5 < sum(parts.values()) / sum(parts4.values()) < 4  # "almost fourfold"
    mlp = parts["gate + up projection"] + parts["down projection"]
    assert mlp > sum(parts.values()) / 2 and parts["KV cache"] < sum(parts.values()) / 100
    agree, of = map(int, run["notes"]["greedy_tokens_agree"].split(" of "))
    assert 0 < agree < of  # "part after a few steps"
    for path in ("course", "course int4"):
        times = run["notes"]["profile"][path]
        assert max(times, key=times.get).endswith("matmul")  # "where the matmul decides the step"
    assert f"this model ({llm.Config.tiny().n_layers} layers)" in _cell("399d0aee")
    notes = run["notes"]  # the run the prose and CONTEXT describe
    assert notes["config"] == repr(big) and (notes["prompt"], notes["new"]) == (128, 256)
    assert "a prompt of 128 tokens and 256 new ones" in _cell("fc4a53b8").replace("\n", " ")
    assert "CONTEXT = 128 + 128" in _cell("1480c6e4")
