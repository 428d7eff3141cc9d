"""Launch the simulated graph in a ROS 2 workspace: `ros2 launch lerobot_lang_nodes sim.launch.py`.

The nodes come from lerobot_lang_nodes.graph, the definition `lerobot-lang sim` uses too; every
argument (`--show-args`) becomes node parameters in one generated params file whose keys match
under any namespace. Examples:

    ros2 launch lerobot_lang_nodes sim.launch.py task:='put the red cube in the bowl'
    ros2 launch lerobot_lang_nodes sim.launch.py namespace:=/robot1 viewer_port:=8011
    ros2 launch lerobot_lang_nodes sim.launch.py policy_path:=/path/to/pretrained_model
    ros2 launch lerobot_lang_nodes sim.launch.py hierarchical:=/path/to/ckpt composed:=true

The DDS environment is not set here: export it in every shell (README, "DDS environment").
"""

from lerobot_lang_nodes.launching import launch_description


def generate_launch_description():
    return launch_description('sim')
