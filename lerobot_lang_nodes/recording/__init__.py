"""Session recording (rosbag2 via `rosbags`) and export to LeRobot v3.0 datasets; ROS-free.

`typestore` resolves message definitions, `bag_writer` is the recorder's non-blocking bag
writer, `bag_reader` reads (and salvages) bags, `timeline` resamples a session onto fixed-rate
frames, `language` builds LeRobot's language rows and `dataset` writes the dataset.
"""
