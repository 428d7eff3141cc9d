"""A stock robosuite scene laid out like a RoboCasa one, for machines without RoboCasa's assets.

robosuite's ``Lift`` with a PandaOmron runs offline. Its robot lacks RoboCasa's two agent views,
which RoboCasa adds to the mobile base itself; this scene adds them the same way (fixed
cameras on ``mobilebase0_support``, at RoboCasa's default poses), so the bridge publishes the
same three views. The episode language is Lift's task ("pick up the cube") and success is
Lift's own ``_check_success``. Only imported inside the bridge's environment (robosuite).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from lerobot_lang_nodes.robocasa.host import KitchenSpec

SCENE = 'Lift'
LANGUAGE = 'pick up the cube'
# RoboCasa's default agent views on the PandaOmron's base: position (m) and MJCF quaternion
# (w, x, y, z) relative to mobilebase0_support, 60 degree vertical field of view.
AGENT_VIEWS = {
    'robot0_agentview_left': ((-0.5, 0.35, 1.05),
                              (0.55623853, 0.29935253, -0.37678665, -0.6775092)),
    'robot0_agentview_right': ((-0.5, -0.35, 1.05),
                               (0.67750919, 0.37678668, -0.29935256, -0.55623859)),
}
_CLASS: Any = None


def _scene_class() -> Any:
    """Lift with the agent views (defined once: robosuite registers every environment class)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from robosuite.environments.manipulation.lift import Lift
    from robosuite.utils.mjcf_utils import find_elements

    class KitchenViewsLift(Lift):
        """Lift whose robot carries RoboCasa's agent views; language in get_ep_meta()."""

        def edit_model_xml(self, xml_str: str) -> str:
            root = ET.fromstring(super().edit_model_xml(xml_str))
            body = find_elements(root=root.find('worldbody'), tags='body',
                                 attribs={'name': 'mobilebase0_support'}, return_first=True)
            if body is None:
                raise ValueError('the robot has no mobilebase0_support body for the agent '
                                 'views (not a PandaOmron?)')
            for name, (pos, quat) in AGENT_VIEWS.items():
                ET.SubElement(body, 'camera', {
                    'name': name, 'mode': 'fixed', 'fovy': '60',
                    'pos': ' '.join(f'{v:g}' for v in pos),
                    'quat': ' '.join(f'{v:g}' for v in quat)})
            return ET.tostring(root).decode('utf8')

        def get_ep_meta(self) -> dict:
            return {'lang': LANGUAGE, 'scene': SCENE}

    _CLASS = KitchenViewsLift
    return _CLASS


def make_stock_env(spec: KitchenSpec, seed: int) -> Any:
    """The stock scene with the spec's robot, cameras, size, rate, horizon and seed."""
    import robosuite
    from robosuite.controllers import load_composite_controller_config

    cls = _scene_class()
    size = int(spec.image_size)
    return robosuite.make(
        cls.__name__, robots=spec.robot,
        controller_configs=load_composite_controller_config(controller=None, robot=spec.robot),
        has_renderer=False, has_offscreen_renderer=True, use_camera_obs=True,
        camera_names=list(spec.cameras), camera_heights=size, camera_widths=size,
        control_freq=spec.control_hz, horizon=int(spec.horizon), ignore_done=False,
        reward_shaping=False, seed=seed)
