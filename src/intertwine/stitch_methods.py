"""Stitching method names, the one grammar of the plan, the stitching module and the figures:
``full``, ``rank<r>``, ``l1_<lambda>``, and the layers P D with P a permutation (``G_RELU_METHODS``).
Library code (no workflow); :mod:`intertwine.workflow.settings` re-exports these names."""

from __future__ import annotations

__all__ = ["G_RELU_METHODS", "METHODS", "parse_method"]

METHODS = ("full", "rank", "grelu", "grelu_cv", "softsort", "l1", "monomial")
# Layers P D with P a permutation: the intertwiner group of ReLU (D > 0), and "monomial", any
# nonzero D (the group of a gated network's value units).
G_RELU_METHODS = ("grelu", "grelu_cv", "softsort", "monomial")


def parse_method(method: str) -> tuple[str, int | float | None]:
    """'full' -> ('full', None); 'rank4' -> ('rank', 4); 'l1_0.01' -> ('l1', 0.01); 'grelu',
    'grelu_cv', 'softsort', 'monomial' -> (method, None)."""
    if method in ("full", *G_RELU_METHODS):
        return method, None
    if method.startswith("rank") and method[4:].isdigit() and int(method[4:]) > 0:
        return "rank", int(method[4:])
    if method.startswith("l1_"):
        try:
            strength = float(method[3:])
        except ValueError:
            strength = -1.0
        if strength > 0:
            return "l1", strength
    raise ValueError(
        f"unknown stitching method {method!r}; expected full, rank<r> (e.g. rank4), "
        "l1_<lambda> (e.g. l1_0.01), grelu, grelu_cv, softsort or monomial"
    )
