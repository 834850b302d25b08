"""PyTorch transformers of the zoo (:mod:`orchestrator.zoo`): GPT-2 decoders, a BERT-base
encoder with its masked-LM head, ViT-B/16. Plain ``torch.nn``; attention is
``torch.nn.functional.scaled_dot_product_attention`` (SDPA: flash or memory-efficient kernels
on a GPU, the math kernel on a CPU).

The layouts, and so the parameter counts, are Hugging Face's ``GPT2LMHeadModel`` and
``BertForMaskedLM`` (without the pooler) and torchvision's ``vit_b_16``; no dropout (a
benchmark's step computes the same with or without it, apart from the masks, and the
sync-correctness check of epoch runs compares loss curves). The token embedding of GPT and
BERT is tied to the output layer, as theirs are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# BERT's [MASK] token id (bert-base-uncased's vocabulary) and the share of positions masked.
MASK_ID = 103
MASK_SHARE = 0.15
IGNORE = -100  # cross-entropy's ignore_index: a position that is not a target


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused q/k/v projection (``qkv``) and an output one
    (``proj``), through SDPA; ``causal``: each token sees only those before it."""

    def __init__(self, d_model: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d_model: int, approximate: str = "none") -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU(approximate=approximate)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.act(self.fc(x)))


class PreNormBlock(nn.Module):
    """GPT-2's and ViT's block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, heads: int, causal: bool, eps: float,
                 approximate: str) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = SelfAttention(d_model, heads, causal)
        self.ln_2 = nn.LayerNorm(d_model, eps=eps)
        self.mlp = MLP(d_model, approximate)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class PostNormBlock(nn.Module):
    """BERT's block: ln(x + attn(x)), then ln(x + mlp(x))."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d_model, heads, causal=False)
        self.ln_1 = nn.LayerNorm(d_model, eps=1e-12)
        self.mlp = MLP(d_model)
        self.ln_2 = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, x: Tensor) -> Tensor:
        x = self.ln_1(x + self.attn(x))
        return self.ln_2(x + self.mlp(x))


def _init(module: nn.Module) -> None:
    """GPT-2's and BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class GPT(nn.Module):
    """A GPT-2 decoder: token ids (B, T) -> next-token logits (B, T, vocab)."""

    def __init__(self, vocab: int, context: int, layers: int, d_model: int, heads: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(context, d_model)
        self.blocks = nn.ModuleList(PreNormBlock(d_model, heads, True, 1e-5, "tanh")
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        _init(self)

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # the output layer tied to wte


class BERT(nn.Module):
    """BERT's encoder and masked-LM head: token ids (B, T) -> logits (B, T, vocab)."""

    def __init__(self, vocab: int, context: int, layers: int, d_model: int, heads: int):
        super().__init__()
        self.word = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(context, d_model)
        self.token_type = nn.Embedding(2, d_model)
        self.ln_emb = nn.LayerNorm(d_model, eps=1e-12)
        self.blocks = nn.ModuleList(PostNormBlock(d_model, heads) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(),
                                  nn.LayerNorm(d_model, eps=1e-12))
        self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        _init(self)

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.word(idx) + self.position(pos) + self.token_type.weight[0]
        x = self.ln_emb(x)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.head(x), self.word.weight, self.decoder_bias)


class ViT(nn.Module):
    """torchvision's ViT: images (B, 3, H, W) -> class logits (B, classes)."""

    def __init__(self, image: int, patch: int, classes: int, layers: int, d_model: int,
                 heads: int) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(3, d_model, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, d_model).normal_(std=0.02))
        self.blocks = nn.ModuleList(PreNormBlock(d_model, heads, False, 1e-6, "none")
                                    for _ in range(layers))
        self.ln = nn.LayerNorm(d_model, eps=1e-6)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)  # (B, patches, d)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embedding
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x)[:, 0])


def build(spec, ds, classes: int | None = None) -> nn.Module:
    """The zoo transformer ``spec`` (a ``zoo.ModelSpec``) for the dataset ``ds``."""
    t = spec.transformer
    if t.family == "vit":
        return ViT(ds.height, t.patch, classes or ds.num_classes, t.layers, t.d_model, t.heads)
    cls = GPT if t.family == "gpt" else BERT
    return cls(ds.num_classes, ds.seq_len, t.layers, t.d_model, t.heads)


class SequenceCrossEntropy(nn.Module):
    """Cross-entropy over every target of a batch: logits (B, T, V) against (B, T), positions
    marked ``IGNORE`` left out (BERT's unmasked ones)."""

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(),
                               ignore_index=IGNORE)


def lm_pair(tokens: Tensor, objective: str, gen: torch.Generator | None = None):
    """(inputs, targets) of token sequences (B, T + 1): next tokens for a causal LM; for a
    masked LM the first T tokens with ``MASK_SHARE`` of them replaced by [MASK], targets the
    originals there and ``IGNORE`` elsewhere."""
    if objective == "causal-lm":
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    x = tokens[:, :-1].clone()
    masked = torch.rand(x.shape, generator=gen) < MASK_SHARE
    y = torch.where(masked, x, torch.full_like(x, IGNORE))
    x[masked] = MASK_ID
    return x, y
