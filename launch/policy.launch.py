"""The policy computer's part of a split graph: `ros2 launch lerobot_lang_nodes policy.launch.py`.

The robot's computer runs its graph without the policy (`sim.launch.py without:=policy`, or
`real.launch.py ... without:=policy`); this computer runs the policy (and with planner:=true
the planner) of that graph, reading the cameras' JPEG frames (compressed_images). Examples:

    ros2 launch lerobot_lang_nodes policy.launch.py robot:=sim
    ros2 launch lerobot_lang_nodes policy.launch.py robot:=real \\
        policy_path:=/path/to/pretrained_model calibration:=my_follower device:=cuda

Both computers need the DDS settings of README "Two computers" (the same ROS_DOMAIN_ID,
discovery beyond localhost, config/fastdds_udp.xml here).
"""

from lerobot_lang_nodes.launching import launch_description


def generate_launch_description():
    return launch_description('policy')
