"""A Compact Convolutional Transformer (Hassani et al. 2021, "Escaping the Big Data Paradigm with
Compact Transformers") for CIFAR-sized inputs, the transformer of the paper's appendix D.4.

- tokenizer ``tokenizer``: 2 layers (:class:`TokenizerLayer`), each a 3x3 conv without bias, a
  ReLU and a 3x3 stride-2 max pool (padding 1), 64 then D channels: 32x32 pixels -> 8x8 = 64
  tokens of dimension D. With ``tokenizer_norm`` each layer ends in an instance norm (below).
- a learnable positional embedding ``pos_embedding`` on the 8x8 token grid (truncated normal,
  std 0.2, as CCT's), bilinearly resized for inputs other than 32x32; with ``positional=
  "sinusoidal"`` (the paper's appendix D.4: "sinusoidal positional encodings") a fixed buffer of
  the same shape instead, the sine-cosine encodings of Vaswani et al. over the token sequence
  (``sinusoidal_encoding``).
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

``tokenizer_norm`` (not in CCT; off by default): each tokenizer layer's pooled output is
standardised per image and channel over its positions, then scaled and shifted per channel (a
GroupNorm with one group per channel: no batch statistics, the same in training and evaluation).
Measured with the default config's zoo training (4 epochs of Adam, lr 2e-3, batch 32, on the
4,000 ``shapes`` training images, one CPU thread) at ``width_multiplier`` 0.5: as in CCT the
network stays near chance for two epochs and ends at 16-23 % test accuracy (three seeds; 66 %
after 10 epochs without lr drops), with the norm it reaches 59-73 % in 40-44 s. Nothing else
came close: a channels LayerNorm (over the channels at each position) or a GroupNorm with one
group in its place 21-24 %, the instance norm before the ReLU instead of after the pool 57-59 %,
only after the last layer 37-51 %, batch norm 38-44 %; kaiming-normal or PyTorch's default
linear init, MLP ratio 1, 4 heads, a positional embedding std of 1 or a sine-cosine one, lr 1e-3
or 3e-3 without the norm all 16-29 %. The shapes' random colours on random backgrounds seem to be
what per-image normalisation removes; batch-normalised CNNs learn them without it.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .resnet import scaled_widths

__all__ = ["CCT", "POSITIONAL", "CCTBlock", "SelfAttention", "TokenizerLayer", "cct", "sinusoidal_encoding"]

#: The positional embeddings of the spec option ``positional``.
POSITIONAL = ("learnable", "sinusoidal")


def sinusoidal_encoding(tokens: int, dim: int) -> torch.Tensor:
    """The fixed sine-cosine encodings (tokens, dim) of Vaswani et al.: entry (p, i) is
    sin(p / 10000^(2 floor(i/2) / dim)) for even i and the cosine of it for odd i."""
    position = torch.arange(tokens, dtype=torch.float64)[:, None]
    rate = 10000.0 ** (2 * (torch.arange(dim) // 2) / dim).to(torch.float64)
    angle = position / rate
    table = torch.where(torch.arange(dim) % 2 == 0, angle.sin(), angle.cos())
    return table.to(torch.get_default_dtype())


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

    def __init__(self, dim: int, heads: int, mlp_dim: int, activation_layer: Callable[[], nn.Module]) -> None:
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


class TokenizerLayer(nn.Module):
    """conv 3x3 (no bias) - ReLU - max pool 3x3 stride 2 - ``norm``: with ``norm`` an instance
    norm (each image's channels standardised over the positions, then a per-channel affine map;
    not in CCT, see the module docstring), else an ``nn.Identity``. The ReLU is functional, so it
    is not a site."""

    def __init__(self, in_channels: int, out_channels: int, norm: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        # GroupNorm with a group per channel: the same for every batch, no running statistics.
        self.norm = nn.GroupNorm(out_channels, out_channels) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Channels-last: PyTorch's CPU max pool runs about 10x faster on it than on NCHW, and a
        # training step of the default CPU model about 10 % (25 % with the norm) faster. The
        # result is the same up to the conv's rounding.
        x = x.contiguous(memory_format=torch.channels_last)
        return self.norm(F.max_pool2d(F.relu(self.conv(x)), kernel_size=3, stride=2, padding=1))


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
        tokenizer_norm: bool = False,
        image_size: int = 32,
        positional: str = "learnable",
    ) -> None:
        super().__init__()
        widths = (3, *tokenizer_widths, dim)
        self.tokenizer = nn.Sequential(
            *(TokenizerLayer(c_in, c_out, tokenizer_norm) for c_in, c_out in zip(widths[:-1], widths[1:]))
        )
        grid = image_size
        for _ in self.tokenizer:
            grid = (grid - 1) // 2 + 1  # the max pool's output size
        if positional not in POSITIONAL:
            raise ValueError(f"model option 'positional': expected one of {POSITIONAL}, got {positional!r}")
        if positional == "sinusoidal":
            # The token sequence is the grid read row by row (``flatten(2)``), so the sequence's
            # encodings fill the grid in that order.
            table = sinusoidal_encoding(grid * grid, dim).T.reshape(1, dim, grid, grid)
            self.register_buffer("pos_embedding", table)
        else:
            self.pos_embedding = nn.Parameter(torch.empty(1, dim, grid, grid))
        self.blocks = nn.Sequential(*(CCTBlock(dim, heads, mlp_dim, activation_layer) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=_LN_EPS)
        self.attention_pool = nn.Linear(dim, 1)
        self.fc = nn.Linear(dim, num_classes)

        # CCT's initialisation (see the module docstring).
        if positional == "learnable":
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
        x = self.tokenizer(x)
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
    tokenizer_norm: bool = False,
    positional: str = "learnable",
) -> CCT:
    """CIFAR CCT: tokenizer widths 64/D, embedding dimension D = 128, 2 heads, MLP dimension 2D
    (widths scaled by `width_multiplier`, D rounded to a multiple of the heads), `depth` encoder
    blocks (349,515 parameters with the defaults; 90,795 at width 0.5, 90,987 with
    `tokenizer_norm`, which trains the default zoo's 4 epochs in 40-44 s on one CPU thread to
    59-73 % on shapes; 4,002,443 at width 2 and depth 7, about CCT-7/3x2's 3.85M)."""
    heads = 2
    (tokenizer_width,) = scaled_widths((64,), width_multiplier)
    dim = heads * scaled_widths((128 // heads,), width_multiplier)[0]  # the head dimension scales
    return CCT(
        depth,
        dim,
        heads,
        2 * dim,
        (tokenizer_width,),
        num_classes,
        activation_layer,
        tokenizer_norm,
        positional=positional,
    )
