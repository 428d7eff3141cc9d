"""ROS 2 nodes for language-conditioned LeRobot policies."""

__version__ = "0.1.0"
