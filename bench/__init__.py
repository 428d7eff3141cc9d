"""The benchmarks: scripts that print figures and write reports under bench/reports/.

Run one as a script (`.venv/bin/python bench/sim_graph.py`) or a module (`python -m
bench.sim_graph`); shared parts are in `bench.harness`. The project's environments put the
repository root on the path (the editable install), so the scripts import each other as
`bench.<name>`.
"""
