"""The `policy` node over DDS with a RoboCasa-layout LeRobot checkpoint: the robot state comes
from the RoboCasa bridge's ``robot_state`` (state_topic), the three PandaOmron views from
``cameras/<view>/image_raw``, and the chunk carries the 12 actions in RoboCasa's order
(state_units raw: no SO-101 conversion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes.nodes import convert, qos
from lerobot_lang_nodes.robocasa import layout
from lerobot_lang_nodes.testing import require_ml, wait_until

require_ml('torch', 'lerobot')

from lerobot_lang_nodes.tiny_models.policies import build_tiny_robocasa_act  # noqa: E402

CHUNK = 10
LOAD_S = 120.0  # a process importing torch and LeRobot on a loaded machine
TASK = 'open the fridge'
ROBOCASA = list(layout.action_names('robocasa'))


def test_policy_runs_a_robocasa_checkpoint_on_the_bridges_topics(launch_node, probe,
                                                                    tmp_path: Path) -> None:
    ckpt = build_tiny_robocasa_act(tmp_path / 'robocasa_act', chunk_size=CHUNK)
    policy = launch_node('lerobot_lang_nodes.nodes.policy_node', params={
        'backend': 'lerobot', 'model_path': str(ckpt), 'device': 'cpu',
        'condition_on': 'task', 'state_topic': 'robot_state', 'lerobot.state_units': 'raw',
        'cameras': list(layout.DEFAULT_CAMERAS), 'lerobot.action_names': ROBOCASA,
        'lerobot.state_names': list(layout.STATE_NAMES), 'lerobot.robot_type': 'panda_omron',
        'ground_truth_topic': '', 'diagnostics_period_s': 0.5})
    chunks = probe.subscribe(ActionChunk, 'action_chunk', qos.COMMAND)
    status = probe.publisher(RuntimeStatus, 'runtime_status', qos.STATUS)
    state = probe.publisher(JointState, 'robot_state', qos.SENSOR)
    images = {c: probe.publisher(Image, f'cameras/{c}/image_raw', qos.SENSOR)
              for c in layout.DEFAULT_CAMERAS}
    probe.publisher(String, 'task', qos.LATCHED).publish(String(data=TASK))
    values = np.linspace(-0.3, 0.3, layout.STATE_DIM)
    rgb = np.full((128, 128, 3), 90, dtype=np.uint8)

    def tick() -> ActionChunk | None:
        msg = JointState(name=list(layout.STATE_NAMES), position=values.tolist())
        msg.header.stamp.sec = 12  # sim time of the bridge's observation
        state.publish(msg)
        for c, pub in images.items():
            pub.publish(convert.rgb_to_image(rgb, 12.0, c))
        status.publish(RuntimeStatus(mode=RuntimeStatus.MODE_ACTION, needs_refill=True,
                                     context_revision=1, control_period_s=0.05))
        return chunks.last

    chunk = wait_until(tick, LOAD_S, 'an ActionChunk from the RoboCasa policy', [policy],
                       poll_s=0.1)
    assert chunk.backend == 'lerobot' and chunk.instruction == TASK
    assert list(chunk.action_names) == ROBOCASA
    assert (chunk.horizon, chunk.action_dim) == (CHUNK, 12)
    assert chunk.header.stamp.sec == 12 and abs(chunk.control_period_s - 0.05) < 1e-9
    actions = np.asarray(chunk.values).reshape(CHUNK, 12)
    assert np.all(np.isfinite(actions)) and np.all(np.abs(actions) <= 1.0)
    assert 'inference failed' not in policy.log_text() and policy.alive
