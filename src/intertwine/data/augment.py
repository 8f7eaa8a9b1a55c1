"""Batched input pipeline on the device: normalisation, translations and flips, mixup and CutMix,
no per-sample Python."""

from __future__ import annotations

import math

import torch


def normalize(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float, each channel standardised with the training set's statistics.
    Other dtypes are an error: float images in [0, 1] would silently be divided by 255 again.

    Parameters
    ----------
    images : Tensor
        uint8 (N, C, H, W) images, 0..255.
    mean, std : Tensor
        (C,) per-channel statistics in 0..1 units, on the images' device.

    Returns
    -------
    Tensor
        float32 (N, C, H, W): ``(images / 255 - mean) / std``, channel by channel.
    """
    if images.dtype != torch.uint8:
        raise ValueError(
            f"normalize takes uint8 images (0..255), got {images.dtype}; pass images as the "
            "data cache holds them, or already-normalised inputs without mean and std"
        )
    return (images.float().div_(255.0) - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)


def draw_augmentation(
    n: int, generator: torch.Generator, translate: int = 2, flip: bool = True
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The random translations and flips of ``n`` samples, drawn from ``generator`` (shifts first,
    then flips), on the generator's device: what :func:`apply_augmentation` applies.

    Parameters
    ----------
    n : int
        The number of samples.
    generator : torch.Generator
        The source of every draw.
    translate : int, default 2
        The largest shift in pixels, each way (0: no shifts drawn).
    flip : bool, default True
        Whether flips are drawn.

    Returns
    -------
    shifts : Tensor or None
        (2, n) integer offsets into the padded image, rows then columns, in 0..2 translate.
    flips : Tensor or None
        (n,) booleans, each true with probability 1/2.
    """
    device = generator.device
    shifts = (
        torch.randint(0, 2 * translate + 1, (2, n), device=device, generator=generator)
        if translate > 0
        else None
    )
    flips = torch.rand(n, device=device, generator=generator) < 0.5 if flip else None
    return shifts, flips


def apply_augmentation(
    x: torch.Tensor, shifts: torch.Tensor | None, flips: torch.Tensor | None, translate: int
) -> torch.Tensor:
    """Each sample of the normalised batch ``x`` (N, C, H, W) shifted by its ``shifts`` (2, N)
    within a zero padding of ``translate`` pixels, then flipped where ``flips`` (N,) is true; a
    None skips that part. Zero padding is padding with the data set's mean RGB (as in the paper).
    Exact (a gather), so a batch of many members' samples augments as each member's would."""
    n, _, h, w = x.shape
    if shifts is not None:
        padded = torch.nn.functional.pad(x, (translate,) * 4)
        rows = shifts[0, :, None] + torch.arange(h, device=x.device)  # (N, H)
        cols = shifts[1, :, None] + torch.arange(w, device=x.device)  # (N, W)
        batch = torch.arange(n, device=x.device)[:, None, None]
        # Advanced indexing gathers each sample's window: result (N, H, W, C).
        x = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
        x = x.permute(0, 3, 1, 2)
    if flips is not None:
        x = torch.where(flips.view(n, 1, 1, 1), x.flip(-1), x)
    return x.contiguous()


def augment(
    x: torch.Tensor, generator: torch.Generator, translate: int = 2, flip: bool = True
) -> torch.Tensor:
    """Random translations of up to ``translate`` pixels and random horizontal flips, per sample:
    :func:`draw_augmentation` then :func:`apply_augmentation`.

    Parameters
    ----------
    x : Tensor
        A normalised batch (N, C, H, W).
    generator : torch.Generator
        The source of every random draw, on ``x``'s device.
    translate : int, default 2
        The largest shift in pixels, each way, vertically and horizontally (0: no translation).
    flip : bool, default True
        Whether each sample is flipped horizontally with probability 1/2.

    Returns
    -------
    Tensor
        The augmented batch, of ``x``'s shape, contiguous.
    """
    shifts, flips = draw_augmentation(len(x), generator, translate, flip)
    return apply_augmentation(x, shifts, flips, translate)


def mix(
    x: torch.Tensor, generator: torch.Generator, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0
) -> tuple[torch.Tensor, float]:
    """Mixup (Zhang et al. 2018) or CutMix (Yun et al. 2019) of a batch with itself reversed, as
    timm's ``Mixup`` in batch mode: one lambda ~ Beta(alpha, alpha) per batch; with both alphas
    above 0, CutMix or mixup at even odds. Mixup returns ``lam x + (1 - lam) x.flip(0)``; CutMix
    pastes a box of area about ``1 - lam`` of ``x.flip(0)`` into ``x`` (clipped at the border) and
    returns the lambda of the box actually pasted. The targets mix alike: sample i's loss is
    ``lam * loss(i's label) + (1 - lam) * loss(the label of sample n - 1 - i)``.

    Parameters
    ----------
    x : Tensor
        A normalised batch (N, C, H, W).
    generator : torch.Generator
        The source of every random draw, on ``x``'s device.
    mixup_alpha : float, default 0.0
        Mixup's Beta parameter (0: no mixup).
    cutmix_alpha : float, default 0.0
        CutMix's Beta parameter (0: no CutMix).

    Returns
    -------
    mixed : Tensor
        The mixed batch, of ``x``'s shape; ``x`` itself when both alphas are 0.
    lam : float
        The weight of each sample's own label; 1.0 when both alphas are 0 (then nothing is
        drawn from ``generator``).
    """
    if mixup_alpha <= 0 and cutmix_alpha <= 0:
        return x, 1.0
    use_cutmix = cutmix_alpha > 0 and (
        mixup_alpha <= 0 or bool(torch.rand((), device=x.device, generator=generator) < 0.5)
    )
    alpha = cutmix_alpha if use_cutmix else mixup_alpha
    # lambda ~ Beta(alpha, alpha) from the generator by the inverse CDF: torch's Beta sampler
    # takes no generator, and every random choice of training comes from the member's.
    # Imported here: scipy.special takes 0.2 s to import, which every job that loads data would pay.
    from scipy.special import betaincinv

    lam = float(betaincinv(alpha, alpha, float(torch.rand((), device=x.device, generator=generator))))
    partner = x.flip(0)
    if not use_cutmix:
        return lam * x + (1 - lam) * partner, lam
    h, w = x.shape[-2:]
    cut = math.sqrt(1.0 - lam)
    cut_h, cut_w = int(h * cut), int(w * cut)
    centre = (
        torch.randint(0, h, (), device=x.device, generator=generator),
        torch.randint(0, w, (), device=x.device, generator=generator),
    )
    top, bottom = max(int(centre[0]) - cut_h // 2, 0), min(int(centre[0]) + cut_h // 2, h)
    left, right = max(int(centre[1]) - cut_w // 2, 0), min(int(centre[1]) + cut_w // 2, w)
    mixed = x.clone()
    mixed[..., top:bottom, left:right] = partner[..., top:bottom, left:right]
    return mixed, 1.0 - (bottom - top) * (right - left) / (h * w)
