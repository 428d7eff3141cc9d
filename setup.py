"""ament_python package lerobot_lang_nodes; also installable with pip (see README)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = 'lerobot_lang_nodes'

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(include=[PACKAGE, f'{PACKAGE}.*']),
    data_files=[
        ('share/ament_index/resource_index/packages', [f'resource/{PACKAGE}']),
        (f'share/{PACKAGE}', ['package.xml']),
        (f'share/{PACKAGE}/launch', glob('launch/*.py')),
        (f'share/{PACKAGE}/config', glob('config/*.yaml') + glob('config/*.xml')),
    ],
    package_data={PACKAGE: ['assets/*']},
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='lerobot_lang_nodes maintainers',
    maintainer_email='maintainers@lerobot-lang-nodes.invalid',
    description='ROS 2 nodes for language-conditioned LeRobot policies.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'lerobot-lang = lerobot_lang_nodes.cli.main:main',
            # `ros2 run lerobot_lang_nodes <node>`; names match graph.py and the node names.
            'sim_bridge = lerobot_lang_nodes.nodes.sim_bridge_node:main',
            # In its own environment (.venv-robocasa): scripts/setup.sh --robocasa.
            'robocasa_bridge = lerobot_lang_nodes.nodes.robocasa_bridge_node:main',
            'planner = lerobot_lang_nodes.nodes.planner_node:main',
            'policy = lerobot_lang_nodes.nodes.policy_node:main',
            'viewer = lerobot_lang_nodes.nodes.viewer_node:main',
            'so101_driver = lerobot_lang_nodes.nodes.so101_driver_node:main',
            # The leader arm (human in the loop); not in the sim/real graphs yet.
            'so101_leader = lerobot_lang_nodes.nodes.so101_leader_node:main',
            'camera = lerobot_lang_nodes.nodes.camera_node:main',
            # planner + policy in one process (graph.composed; `lerobot-lang sim --composed`).
            'planner_policy = lerobot_lang_nodes.nodes.composed_node:main',
            'recorder = lerobot_lang_nodes.nodes.recorder_node:main',
            # The scripted expert as a human operator (DAgger in simulation).
            'virtual_operator = lerobot_lang_nodes.nodes.virtual_operator_node:main',
        ],
        # Runtime adapters of other packages, by LeRobot policy type (hierarchical/registry.py):
        # `my_policy = "my_package.adapter:MyPolicyAdapter"` in that package's metadata.
        'lerobot_lang_nodes.adapters': [],
    },
)
