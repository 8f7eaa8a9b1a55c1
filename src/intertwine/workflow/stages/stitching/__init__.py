"""Model stitching with layers of a symmetry group (Godfrey et al. section 4, appendix D)."""
