"""The lerobot-lang command: bring-up without ros2cli and small operator commands."""
