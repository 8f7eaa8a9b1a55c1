"""Network dissection: concept-aligned units with and without a residual activation (section 5)."""
