"""High-level planner backends (TextGenerator implementations)."""
