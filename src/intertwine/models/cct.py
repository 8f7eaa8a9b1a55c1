"""A Compact Convolutional Transformer (Hassani et al. 2021, "Escaping the Big Data Paradigm with
Compact Transformers") for CIFAR-sized inputs, the transformer of the paper's appendix D.4.

- tokenizer ``tokenizer``: 2 layers, each a 3x3 conv without bias, a ReLU and a 3x3 stride-2 max
  pool (padding 1), 64 then D channels: 32x32 pixels -> 8x8 = 64 tokens of dimension D.
- a learnable positional embedding ``pos_embedding`` on the 8x8 token grid (truncated normal,
  std 0.2, as CCT's), bilinearly resized for inputs other than 32x32.
- encoder blocks ``blocks.0``, ``blocks.1``, ... (:class:`CCTBlock`), pre-norm: x + MHSA(LN(x)),
  then x + MLP(LN(x)) with MLP = Linear(D, 2D) - ``act`` - Linear(2D, D).
- head: LayerNorm, sequence pooling (softmax over the tokens of a Linear(D, 1) score, then the
  weighted sum of the tokens), linear ``fc``.

Layout: every tensor between the tokenizer and the head is channels-first, (N, D, T) like a 1-D
feature map, and so is every site: ``blocks.K.act`` (the MLP activation, inside the residual
block, 2D channels) and ``blocks.K.out`` (an ``nn.Identity`` on the block's residual output,
D channels), so that the stitching layers (acting on dim 1), the similarity measures and the hooks
treat a token like a pixel. The blocks transpose to (N, T, D) internally for LayerNorm, attention
and the linear layers; the activation is elementwise, so it runs on the channels-first view.

Differences from CCT (its ``cct_2_3x2_32`` at ``width_multiplier`` 1 and the default depth 2):
the tokenizer's ReLUs are functional, not modules, so they are not sites (the zoo's sites are the
encoder's, where the paper stitches) and stay ReLU whatever the spec's ``activation``, as in
CCT; the encoder is a plain pre-norm transformer (CCT also normalises the residual stream between
attention and MLP); the MLP ratio is 2 (CCT-2 has 1; CCT-6 and larger have 2), so the inner
site is wider than the residual stream, as in ConvNeXt; the head count stays 2 at every width
(the embedding dimension is rounded to a multiple of it); no dropout, attention dropout or
stochastic depth. Initialisation as CCT's: linear weights truncated-normal with std 0.02, zero
biases, conv weights kaiming-normal, LayerNorms at 1 and 0.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .resnet import _scaled

__all__ = ["CCT", "CCTBlock", "SelfAttention", "cct"]

_LN_EPS = 1e-5  # nn.LayerNorm's default, as CCT


class SelfAttention(nn.Module):
    """Multi-head self-attention on (N, T, D): a bias-free ``qkv`` projection, scaled dot-product
    attention per head, an output projection ``proj`` (CCT's Attention without dropout)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"embedding dimension {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, d))


class CCTBlock(nn.Module):
    """Pre-norm transformer encoder block on channels-first (N, D, T) tensors:
    y = x + attn(norm1(x)), then ``out`` of y + fc2(act(fc1(norm2(y)))) (``out`` an identity: no
    activation on the residual stream)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int,
                 activation_layer: Callable[[], nn.Module]) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=_LN_EPS)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=_LN_EPS)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.act = activation_layer()
        self.fc2 = nn.Linear(mlp_dim, dim)
        # Kept as a module so the residual output is a named site.
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(*self.start(x))

    def start(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The block up to the activation `act`: (act output (N, mlp_dim, T), the residual stream
        after attention (N, D, T), which the MLP's skip path still needs)."""
        tokens = x.transpose(1, 2)
        tokens = tokens + self.attn(self.norm1(tokens))
        inner = self.act(self.fc1(self.norm2(tokens)).transpose(1, 2))
        return inner, tokens.transpose(1, 2)

    def finish(self, inner: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rest of the block, given `act`'s output and the residual stream after attention."""
        return self.out(x + self.fc2(inner.transpose(1, 2)).transpose(1, 2))


class CCT(nn.Module):
    """Convolutional tokenizer, positional embedding, encoder blocks `blocks.0`, `blocks.1`, ...,
    LayerNorm, sequence pooling, linear head."""

    def __init__(
        self,
        depth: int,
        dim: int,
        heads: int,
        mlp_dim: int,
        tokenizer_widths: tuple[int, ...],
        num_classes: int = 10,
        activation_layer: Callable[[], nn.Module] = nn.GELU,
        image_size: int = 32,
    ) -> None:
        super().__init__()
        widths = (3, *tokenizer_widths, dim)
        self.tokenizer = nn.ModuleList(
            nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)
            for c_in, c_out in zip(widths[:-1], widths[1:])
        )
        grid = image_size
        for _ in self.tokenizer:
            grid = (grid - 1) // 2 + 1  # the max pool's output size
        self.pos_embedding = nn.Parameter(torch.empty(1, dim, grid, grid))
        self.blocks = nn.Sequential(
            *(CCTBlock(dim, heads, mlp_dim, activation_layer) for _ in range(depth))
        )
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS)
        self.attention_pool = nn.Linear(dim, 1)
        self.fc = nn.Linear(dim, num_classes)

        # CCT's initialisation (see the module docstring).
        nn.init.trunc_normal_(self.pos_embedding, std=0.2)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._head(self.blocks(self._embed(x)))

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, H, W) to tokens (N, D, T), positional embedding added."""
        # Channels-last: PyTorch's CPU max pool is about 10x faster on it than on NCHW (and the
        # tokenizer's step 25 % faster); the result is the same up to the convs' rounding.
        x = x.contiguous(memory_format=torch.channels_last)
        for conv in self.tokenizer:
            x = F.max_pool2d(F.relu(conv(x)), kernel_size=3, stride=2, padding=1)
        pos = self.pos_embedding
        if x.shape[-2:] != pos.shape[-2:]:
            pos = F.interpolate(pos, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return (x + pos).flatten(2)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.norm(x.transpose(1, 2))
        weights = self.attention_pool(tokens).softmax(dim=1)  # (N, T, 1)
        return self.fc((weights.transpose(1, 2) @ tokens).squeeze(1))

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The forward pass cut at each site: (site, piece) pairs, each piece mapping the state
        left by the previous one to the state at its site. Inside a block the state is
        (act output, residual stream after attention), since the MLP's skip path still needs the
        latter; the first block also runs the tokenizer and positional embedding before it."""
        pieces: list = []
        for k, block in enumerate(self.blocks):
            if k == 0:
                def start(x, b=block):
                    return b.start(self._embed(x))
            else:
                def start(x, b=block):
                    return b.start(x)
            pieces.append((f"blocks.{k}.act", start))
            pieces.append((f"blocks.{k}.out", lambda inner, x, b=block: (b.finish(inner, x),)))
        pieces.append((None, lambda x: (self._head(x),)))
        return pieces

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """(module name, channels, inside_residual) of each activation, in forward order."""
        layout = []
        for k, block in enumerate(self.blocks):
            layout.append((f"blocks.{k}.act", block.fc1.out_features, True))
            layout.append((f"blocks.{k}.out", block.fc2.out_features, False))
        return layout


def cct(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.GELU,
    depth: int = 2,
) -> CCT:
    """CIFAR CCT: tokenizer widths 64/D, embedding dimension D = 128, 2 heads, MLP dimension 2D
    (widths scaled by `width_multiplier`, D rounded to a multiple of the heads), `depth` encoder
    blocks."""
    heads = 2
    (tokenizer_width,) = _scaled((64,), width_multiplier)
    dim = heads * _scaled((128 // heads,), width_multiplier)[0]  # the head dimension scales
    return CCT(depth, dim, heads, 2 * dim, (tokenizer_width,), num_classes, activation_layer)
