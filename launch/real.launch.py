"""Launch the real SO-101 graph: `ros2 launch lerobot_lang_nodes real.launch.py`.

The nodes come from lerobot_lang_nodes.graph, the definition `lerobot-lang real` uses too; every
argument (`--show-args`) becomes node parameters in one generated params file whose keys match
under any namespace. Examples:

    ros2 launch lerobot_lang_nodes real.launch.py robot_yaml:=robot.yaml
    ros2 launch lerobot_lang_nodes real.launch.py robot_port:=/dev/ttyACM0 \
        calibration:=my_follower cameras:=cameras.yaml policy_path:=/path/to/pretrained_model \
        task:='put the red cube in the bowl' record:=true record_dir:=recordings

The driver starts paused: call the /resume service (or `lerobot-lang resume`) to move.
The DDS environment is not set here: export it in every shell (README, "DDS environment").
"""

from lerobot_lang_nodes.launching import launch_description


def generate_launch_description():
    return launch_description('real')
