"""The DEQ neural tangent kernel (Feng & Kolter)."""
