"""Gated networks and neural path kernels (Lakshminarayanan & Singh)."""
