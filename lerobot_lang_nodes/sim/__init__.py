"""ROS-free MuJoCo SO-101 simulator: scene (scene.py), tasks (tasks.py), IK expert (expert.py).

Nodes wrap these modules; nothing here imports rclpy. Set MUJOCO_GL=egl before rendering.
"""
