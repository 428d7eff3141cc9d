"""Run in .venv-robocasa by test_bridge_robosuite.py: the host's order mapping on real robosuite.

Prints one JSON line: for each controller part ordering (stock, RoboCasa's), the order the host
read and how the end effector, base and fingers moved under named commands.
"""

import json
import sys

import numpy as np

from lerobot_lang_nodes.robocasa import envs, layout
from lerobot_lang_nodes.robocasa.host import KitchenHost, KitchenSpec
from lerobot_lang_nodes.robocasa.stock import make_stock_env

KITCHEN_PARTS = ['right', 'right_gripper', 'base', 'torso']  # what RoboCasa's kitchens force


def make(parts):
    def factory(spec, seed):
        import robosuite
        from robosuite.controllers import load_composite_controller_config
        if parts is None:
            return make_stock_env(spec, seed)
        cfg = load_composite_controller_config(controller=None, robot=spec.robot)
        cfg['composite_controller_specific_configs'] = {'body_part_ordering': parts}
        from lerobot_lang_nodes.robocasa import stock
        return robosuite.make(stock._scene_class().__name__, robots=spec.robot,
                              controller_configs=cfg, has_renderer=False,
                              has_offscreen_renderer=False, use_camera_obs=False,
                              control_freq=spec.control_hz, horizon=1000, seed=seed)
    return factory


def drive(host, policy_order, steps=8, **named):
    row = np.zeros(12)
    names = layout.action_names(policy_order)
    for name, value in named.items():
        row[names.index(name)] = value
    for _ in range(steps):
        host.step(row)


out = {}
for label, parts in (('stock', None), ('kitchen', KITCHEN_PARTS)):
    for policy_order in ('lerobot', 'robocasa'):
        spec = KitchenSpec(simulator='robosuite', cameras=(), action_order=policy_order)
        host = KitchenHost(spec, make(parts), envs.reseed_rng)
        s0 = host.state()
        drive(host, policy_order, **{'eef_pos.x': 1.0})
        s1 = host.state()
        drive(host, policy_order, gripper=1.0)
        s2 = host.state()
        drive(host, policy_order, **{'base.x': 1.0, 'base_mode': 1.0})
        s3 = host.state()
        out[f'{label}/{policy_order}'] = {
            'env_order': host.env_order,
            'eef_dx': float(s1[0] - s0[0]),
            'finger_closed_by': float(s1[14] - s2[14]),
            'base_dx': float(s3[7] - s2[7]),
        }
        host.close()
print(json.dumps(out))
sys.stdout.flush()
