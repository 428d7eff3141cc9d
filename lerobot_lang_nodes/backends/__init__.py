"""Backends (planners, policies, simulators) behind a lazy registry."""
