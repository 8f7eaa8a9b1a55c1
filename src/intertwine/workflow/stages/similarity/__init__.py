"""Representation similarity: Procrustes, CKA and their G_ReLU versions between members."""
