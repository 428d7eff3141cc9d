"""ROS-free SO-101 hardware path: Feetech protocol, bus, calibration, units and driver core."""
