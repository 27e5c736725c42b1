"""The capstone model's data: its shapes (``Config``), its weights (``Weights``, ``random_weights``), its
tokens (UTF-8 bytes: ``encode``, ``decode``) and its file format (``save``, ``load``). ``solutions.llm``
runs the model and re-exports all of these.

The file is ``torch.save`` of ``{"format": FORMAT, "config": the Config as a dict, "weights": {name:
tensor}}``, the names of ``Weights.state_dict`` (``embed``, ``norm``, ``lm_head``, ``layers.<i>.<field>``),
tensors contiguous on the CPU; ``load`` reads it with ``weights_only=True`` (no pickled code runs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["Config", "Layer", "Weights", "random_weights", "encode", "decode", "save", "load", "FORMAT"]

FORMAT = "tkcourse-llm-1"
#: The model the course trained itself (``research/llm/train_tiny.py``: ``Config.tiny()``, fp16, on the
#: Python standard library's source), shipped with the course's data: what ``load()`` reads.
SHIPPED = Path(__file__).resolve().parents[1] / "tkcourse" / "data" / "llm" / "tiny.pt"


@dataclass(frozen=True)
class Config:
    n_layers: int
    d_model: int
    n_heads: int  # query heads, Hq
    n_kv_heads: int  # key/value heads, Hkv (grouped-query attention: Hkv divides Hq)
    head_dim: int  # D
    ffn_dim: int  # F, SwiGLU's hidden width
    vocab: int
    max_seq: int  # the longest sequence (prompt and generated tokens) the model takes
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    @classmethod
    def llama3_8b(cls) -> Config:
        """Llama 3 8B's shapes (Meta's ``params.json``): 8.0B parameters."""
        return cls(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, ffn_dim=14336,
                   vocab=128256, max_seq=8192, rope_theta=500000.0, norm_eps=1e-5)

    @classmethod
    def tiny(cls) -> Config:
        """A byte-level model of 3.3M parameters: small enough for Triton's interpreter, big enough to
        learn to write Python-like text (``research/llm/train_tiny.py``). Widths are multiples of 128
        (int4 groups) and D = 64 (the decode kernel's smallest head)."""
        return cls(n_layers=4, d_model=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=768,
                   vocab=256, max_seq=512, rope_theta=10000.0, norm_eps=1e-5)

    def check(self) -> Config:
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "vocab", "max_seq"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"config.{name} must be a positive int, got {v!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"config.n_heads = {self.n_heads} must be a multiple of n_kv_heads = {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"config.head_dim must be even (RoPE rotates pairs), got {self.head_dim}")
        return self


@dataclass
class Layer:
    attn_norm: torch.Tensor  # (d_model,)
    wqkv: torch.Tensor  # ((Hq + 2·Hkv)·D, d_model): q's rows, then k's, then v's
    wo: torch.Tensor  # (d_model, Hq·D)
    mlp_norm: torch.Tensor  # (d_model,)
    w_gate_up: torch.Tensor  # (2F, d_model): gate's rows, then up's
    w_down: torch.Tensor  # (d_model, F)


@dataclass
class Weights:
    config: Config
    embed: torch.Tensor  # (vocab, d_model)
    layers: list[Layer]
    norm: torch.Tensor  # (d_model,), the final RMSNorm
    lm_head: torch.Tensor  # (vocab, d_model)
    prepared: dict = field(default_factory=dict, repr=False, compare=False)  # (kernels, int4) -> what llm.prepare made

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = {"embed": self.embed, "norm": self.norm, "lm_head": self.lm_head}
        for i, layer in enumerate(self.layers):
            out.update({f"layers.{i}.{f.name}": getattr(layer, f.name) for f in dataclasses.fields(Layer)})
        return out

    @classmethod
    def from_state_dict(cls, config: Config, sd: dict) -> Weights:
        layers = [Layer(**{f.name: sd[f"layers.{i}.{f.name}"] for f in dataclasses.fields(Layer)})
                  for i in range(config.n_layers)]
        return cls(config, sd["embed"], layers, sd["norm"], sd["lm_head"])

    @property
    def dtype(self):
        return self.embed.dtype

    @property
    def device(self):
        return self.embed.device


def random_weights(config: Config, dtype=torch.float32, device="cpu", seed: int = 0) -> Weights:
    """Weights drawn from N(0, 1/fan_in) (the embedding N(0, 1), the norms 1): activations of unit size
    in every layer and logits of size about 1. One seed on one device gives the same weights."""
    config.check()
    g = torch.Generator(device=device).manual_seed(seed)
    c, D = config, config.head_dim

    def normal(out, inp, std=None):
        w = torch.randn((out, inp), generator=g, device=device, dtype=dtype)
        return w.mul_(1 / math.sqrt(inp) if std is None else std)

    def ones():
        return torch.ones(c.d_model, device=device, dtype=dtype)

    layers = [Layer(ones(), normal((c.n_heads + 2 * c.n_kv_heads) * D, c.d_model), normal(c.d_model, c.n_heads * D),
                    ones(), normal(2 * c.ffn_dim, c.d_model), normal(c.d_model, c.ffn_dim))
              for _ in range(c.n_layers)]
    return Weights(config, normal(c.vocab, c.d_model, 1.0), layers, ones(), normal(c.vocab, c.d_model))


# ---- tokens and files ----
def encode(text: str) -> list[int]:
    """The UTF-8 bytes of ``text``: a character outside ASCII is two to four tokens."""
    return list(text.encode("utf-8"))


def decode(ids) -> str:
    """The text of byte tokens; a sequence cut inside a character shows U+FFFD there."""
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def save(path, config: Config, weights: Weights) -> None:
    """One file: ``torch.save`` of the format name, the config as a plain dict and the tensors by name."""
    sd = {k: v.detach().cpu().contiguous() for k, v in weights.state_dict().items()}
    torch.save({"format": FORMAT, "config": dataclasses.asdict(config), "weights": sd}, path)


def load(path=None, device="cpu", dtype=None) -> tuple[Config, Weights]:
    """``(config, weights)`` of the file ``save`` wrote (the shipped model, ``SHIPPED``, when ``path`` is
    None), on ``device`` (in ``dtype`` if given, else as stored)."""
    path = SHIPPED if path is None else path
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file (save writes one)")
    config = Config(**blob["config"]).check()
    sd = {k: v.to(device=device, dtype=dtype or v.dtype) for k, v in blob["weights"].items()}
    return config, Weights.from_state_dict(config, sd)
