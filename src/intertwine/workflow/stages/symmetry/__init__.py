"""The symmetry self-check: the groups' actions leave each member's function unchanged."""
