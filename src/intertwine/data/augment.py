"""Batched input pipeline on the device: normalisation, translations and flips, no per-sample Python."""

from __future__ import annotations

import torch


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float, each channel standardised with the training set's statistics.
    Other dtypes are an error: float images in [0, 1] would silently be divided by 255 again."""
    if images.dtype != torch.uint8:
        raise ValueError(
            f"normalize takes uint8 images (0..255), got {images.dtype}; pass images as the "
            "data cache holds them, or already-normalised inputs without mean and std"
        )
    return (images.float().div_(255.0) - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)


def augment(
    x: torch.Tensor, generator: torch.Generator, translate: int = 2, flip: bool = True
) -> torch.Tensor:
    """Random translations of up to ``translate`` pixels and random horizontal flips, per sample.

    ``x`` is a normalised batch, so zero padding is padding with the data set's mean RGB (as in
    the paper). All random numbers come from ``generator``, which must live on ``x``'s device.
    """
    n, _, h, w = x.shape
    if translate > 0:
        padded = torch.nn.functional.pad(x, (translate,) * 4)
        shifts = torch.randint(0, 2 * translate + 1, (2, n), device=x.device, generator=generator)
        rows = shifts[0, :, None] + torch.arange(h, device=x.device)  # (N, H)
        cols = shifts[1, :, None] + torch.arange(w, device=x.device)  # (N, W)
        batch = torch.arange(n, device=x.device)[:, None, None]
        # Advanced indexing gathers each sample's window: result (N, H, W, C).
        x = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
        x = x.permute(0, 3, 1, 2)
    if flip:
        flips = torch.rand(n, device=x.device, generator=generator) < 0.5
        x = torch.where(flips.view(n, 1, 1, 1), x.flip(-1), x)
    return x.contiguous()
