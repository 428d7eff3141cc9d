"""ROS-free runtime core: chunk executor, safety clamps, language state, prompts, planner loop.

Plain Python and numpy only; nothing here may import rclpy or any ROS module, so the rules
can be unit-tested without a ROS install and the nodes stay thin wrappers.
"""
