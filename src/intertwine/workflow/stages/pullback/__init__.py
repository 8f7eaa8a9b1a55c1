"""Excitation pullbacks (Satkiewicz)."""
