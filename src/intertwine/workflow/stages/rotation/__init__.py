"""The rotation penalty (Godfrey et al. section 3.3)."""
