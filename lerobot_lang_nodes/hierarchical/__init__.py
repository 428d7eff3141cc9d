"""Hierarchical models: one checkpoint serves the planner (text head) and the policy (actions).

``registry`` maps a LeRobot policy type (the checkpoint's config.json ``type``) to a runtime
adapter, ``loading`` keeps one loaded model per (path, device, dtype) per process, and
``backends`` exposes them as the `hierarchical` planner and policy backends. The `two_head`
policy type (configuration_ / modeling_ / processor_two_head) is the project's own tiny
two-headed LeRobot policy. Nothing here imports torch until a model is loaded.
"""
