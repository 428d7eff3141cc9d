"""Tiny real models built offline (tests, benchmarks, the dry run): no hub download needed.

Each builder makes a genuine transformers / LeRobot checkpoint directory with random or briefly
trained weights, so the backends load it exactly as they load a user's checkpoint.
"""
