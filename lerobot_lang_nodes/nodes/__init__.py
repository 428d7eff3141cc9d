"""Thin rclpy nodes wrapping the ROS-free core; one module per executable."""
