"""Weight matching and linear mode connectivity between members."""
