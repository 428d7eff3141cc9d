"""Action policy backends (chunk producers)."""
