"""RoboCasa kitchens (PandaOmron) behind the project's topics: action and state layouts, the
environment factories, a faithful stand-in of RoboCasa's environment and the ROS-free host.

Nothing here imports robosuite, RoboCasa or MuJoCo at import time: the bridge runs in its own
virtual environment (scripts/setup.sh --robocasa) and loads them only when it creates a scene.
"""
