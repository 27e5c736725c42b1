"""Train the capstone's tiny byte-level model (``solutions.llm.Config.tiny()``) on Python source.

The text is the Python standard library's own ``*.py`` files (``sysconfig.get_paths()["stdlib"]``),
which every machine with Python has: no download. The selection is deterministic (every file, sorted
by path, ``site-packages`` left out) and so is the split: a file goes to the held-out set when the
SHA-1 of its relative path ends in a byte below 13 (about 5%), so the two sets never share a file.

The training forward is ``solutions.llm.forward``: the model in torch ops, with the course's
FlashAttention forward and backward (``solutions.kernels.attention.attention``: lessons 06 and 07,
grouped-query heads, causal) in place of SDPA on a GPU. AdamW (Loshchilov & Hutter 2019) on fp32
master weights, bf16 autocast for the matmuls and the attention, a linear warmup and a cosine decay.
The weights are saved in fp16 (``solutions.llm.save``), then the saved file is loaded back and
continues a few prompts greedily with the course's kernels.

GPU (a few minutes on an H200):

    PYTHONPATH=$PWD python3 research/llm/train_tiny.py --out research/llm/tiny.pt

CPU smoke test (seconds; torch's SDPA, a few files, two steps):

    PYTHONPATH=$PWD python3 research/llm/train_tiny.py --steps 2 --tiny --out /tmp/tiny.pt
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import sysconfig
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import tkcourse  # noqa: F401  (first: picks the interpreter on a machine with no GPU)
from solutions import llm

PROMPTS = ["import os\n", "def ", "class Parser:\n    def __init__(self"]


def corpus(tiny: bool = False) -> tuple[bytes, bytes, int]:
    """(train bytes, held-out bytes, files): the standard library's ``*.py`` files, each ending in a blank line."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    if tiny:
        files = files[:12]
    train, held = [], []
    for p in files:
        rel = p.relative_to(root).as_posix()
        try:
            text = p.read_bytes()
        except OSError:
            continue
        (held if hashlib.sha1(rel.encode()).digest()[-1] < 13 else train).append(text + b"\n\n")
    while sum(map(len, held)) < 8192 and len(train) > 1:  # a tiny selection may draw too little: hold out more
        held.append(train.pop())
    return b"".join(train), b"".join(held), len(files)


def batches(data: torch.Tensor, batch: int, seq: int, generator: torch.Generator):
    """Random windows of ``seq + 1`` bytes: inputs and next-byte targets, (batch, seq) each."""
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=generator)
    idx = starts[:, None] + torch.arange(seq + 1)
    w = data[idx.to(data.device)].long()
    return w[:, :-1], w[:, 1:]


def make_attention(device):
    """The course's trainable FlashAttention on a GPU, None (SDPA) on a CPU."""
    if device.type != "cuda":
        return None
    from solutions.kernels import attention as k_attention

    return lambda q, k, v: k_attention.attention(q, k, v, causal=True)


def loss_of(weights, x, y, attention, autocast):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = llm.forward(weights, x, attention)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


def main(argv=None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where to save the fp16 weights (solutions.llm.save)")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--minutes", type=float, default=4.0, help="stop earlier when training has run this long")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-tokens", type=int, default=300)
    ap.add_argument("--tiny", action="store_true", help="a smoke test: 12 files, batch 2 of 64 bytes")
    ap.add_argument("--no-course-attention", action="store_true", help="SDPA in training, even on a GPU")
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.tiny:
        args.batch, args.seq = 2, 64
    torch.manual_seed(args.seed)
    config = llm.Config.tiny()
    if args.seq > config.max_seq:
        raise SystemExit(f"--seq {args.seq} is longer than the model's max_seq {config.max_seq}")

    t0 = time.time()
    train_bytes, held_bytes, n_files = corpus(args.tiny)
    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8).to(device)
    held = torch.frombuffer(bytearray(held_bytes), dtype=torch.uint8).to(device)
    print(f"corpus: {n_files} files of {sysconfig.get_paths()['stdlib']}, {train.numel() / 1e6:.1f} MB train, "
          f"{held.numel() / 1e6:.2f} MB held out ({time.time() - t0:.1f} s)", flush=True)

    weights = llm.random_weights(config, torch.float32, device, seed=args.seed)  # fp32 master weights
    params = list(weights.state_dict().values())
    for p in params:
        p.requires_grad_(True)
    n_params = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() == 2]  # matrices decay; norms do not
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    attention = None if args.no_course_attention else make_attention(device)
    autocast = device.type == "cuda"
    print(f"model: {config}\n{n_params / 1e6:.2f}M parameters; attention: "
          f"{'course FlashAttention' if attention else 'SDPA'}; {'bf16 autocast' if autocast else 'fp32'}; "
          f"batch {args.batch} x {args.seq} bytes", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    held_gen = torch.Generator().manual_seed(args.seed + 1)
    held_batches = [batches(held, args.batch, args.seq, held_gen) for _ in range(2 if args.tiny else 16)]

    def held_loss():
        with torch.no_grad():
            return sum(loss_of(weights, x, y, attention, autocast).item() for x, y in held_batches) / len(held_batches)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    losses, start = [], time.time()
    every = 1 if args.tiny else 100
    print(f"{'step':>6} {'loss':>7} {'bits/byte':>9} {'held':>7} {'lr':>8} {'s':>6}", flush=True)
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batches(train, args.batch, args.seq, gen)
        loss = loss_of(weights, x, y, attention, autocast)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        elapsed = time.time() - start
        last = step == args.steps - 1 or elapsed > 60 * args.minutes
        if step % every == 0 or last:
            held_txt = f"{held_loss():7.3f}" if (step % (10 * every) == 0 or last) else " " * 7
            print(f"{step:6d} {losses[-1]:7.3f} {losses[-1] / math.log(2):9.3f} {held_txt} {lr_at(step):8.2e} "
                  f"{elapsed:6.1f}", flush=True)
        if last:
            break
    print(f"trained {len(losses)} steps in {time.time() - start:.1f} s; held-out loss {held_loss():.3f} nats/byte",
          flush=True)

    half = llm.Weights.from_state_dict(config, {k: v.detach().half() for k, v in weights.state_dict().items()})
    llm.save(args.out, config, half)
    size = Path(args.out).stat().st_size
    print(f"saved {args.out} ({size / 1e6:.1f} MB)", flush=True)

    _, back = llm.load(args.out, device=device)
    kernels = "course" if device.type == "cuda" else "torch"
    for prompt in PROMPTS[:1] if args.tiny else PROMPTS:
        t = time.time()
        new = llm.generate(back, prompt, args.sample_tokens, kernels=kernels)
        print(f"\n--- sample ({kernels} kernels, greedy, {args.sample_tokens} bytes in {time.time() - t:.2f} s) ---\n"
              f"{prompt}{llm.decode(new[0].tolist())}\n---", flush=True)
    return losses


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
