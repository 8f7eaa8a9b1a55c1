"""The model zoo: many seeds of each architecture, trained (Godfrey et al. section 4's members)."""
