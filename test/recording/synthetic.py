"""A synthetic session written as a real rosbag2 bag (through the recorder's BagWriter), for
export tests that need no DDS: a 6-joint arm, two cameras, action chunks, language."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lerobot_lang_nodes.recording.bag_writer import BagWriter, TopicSpec, WriterSettings
from lerobot_lang_nodes.recording.bag_writer import qos_from_fields
from lerobot_lang_nodes.recording.typestore import TypeResolver

JOINTS = ('shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper')
T0 = 1000.0  # session clock start (s)
TOPICS = {
    '/joint_states': 'sensor_msgs/msg/JointState',
    '/action_chunk': 'lerobot_lang_msgs/msg/ActionChunk',
    '/language_context': 'lerobot_lang_msgs/msg/LanguageContext',
    '/task': 'std_msgs/msg/String',
    '/interjection': 'std_msgs/msg/String',
    '/speech': 'std_msgs/msg/String',
    '/vqa_log': 'std_msgs/msg/String',
    '/task_outcome': 'lerobot_lang_msgs/msg/TaskOutcome',
    '/cameras/front/image_raw': 'sensor_msgs/msg/Image',
    '/cameras/wrist/image_raw': 'sensor_msgs/msg/Image',
}


class Session:
    """Builds messages with the rosbags type store and writes them in time order."""

    def __init__(self) -> None:
        self.resolver = TypeResolver()
        for t in TOPICS.values():
            self.resolver.ensure(t)
        self.store = self.resolver.store
        self.items: list[tuple[float, str, object]] = []

    def make(self, msgtype: str, **fields):
        """A message with ``fields`` and every other field zero / empty, so the builders keep
        working when an interface gains a field."""
        from rosbags.typesys.base import Nodetype
        cls = self.store.types[msgtype]
        for name, (kind, detail) in self.store.fielddefs[msgtype][1]:
            if name in fields:
                continue
            if kind == Nodetype.NAME:
                fields[name] = self.make(detail)
            elif kind == Nodetype.BASE:
                base = detail[0]
                fields[name] = ('' if base == 'string' else False if base == 'bool'
                                else 0.0 if base.startswith('float') else 0)
            else:  # arrays and sequences
                elem = detail[0]
                numeric = elem[0] == Nodetype.BASE and elem[1][0] not in ('string', 'bool')
                fields[name] = np.zeros(0, dtype=elem[1][0]) if numeric else []
        return cls(**fields)

    def _stamp(self, t: float):
        Time = self.store.types['builtin_interfaces/msg/Time']
        sec = int(np.floor(t))
        return Time(sec=sec, nanosec=int(round((t - sec) * 1e9)) % 1_000_000_000)

    def _header(self, t: float):
        return self.store.types['std_msgs/msg/Header'](stamp=self._stamp(t), frame_id='')

    def add(self, t: float, topic: str, msg: object) -> None:
        self.items.append((t, topic, msg))

    def string(self, t: float, topic: str, text: str) -> None:
        self.add(t, topic, self.store.types['std_msgs/msg/String'](data=text))

    def joints(self, t: float, q: np.ndarray) -> None:
        JS = self.store.types['sensor_msgs/msg/JointState']
        self.add(t, '/joint_states', JS(header=self._header(t), name=list(JOINTS),
                                        position=np.asarray(q, dtype=np.float64),
                                        velocity=np.zeros(0), effort=np.zeros(0)))

    def image(self, t: float, cam: str, value: int, h: int = 48, w: int = 64) -> None:
        Image = self.store.types['sensor_msgs/msg/Image']
        data = np.full((h, w, 3), value, dtype=np.uint8).reshape(-1)
        self.add(t, f'/cameras/{cam}/image_raw',
                 Image(header=self._header(t), height=h, width=w, encoding='rgb8',
                       is_bigendian=0, step=w * 3, data=data))

    def chunk(self, t: float, values: np.ndarray, revision: int, period: float) -> None:
        self.add(t, '/action_chunk', self.make(
            'lerobot_lang_msgs/msg/ActionChunk', header=self._header(t),
            context_revision=revision, action_names=list(JOINTS), horizon=len(values),
            action_dim=len(JOINTS), values=np.asarray(values, dtype=np.float64).reshape(-1),
            control_period_s=period, backend='scripted'))

    def context(self, t: float, task: str, subtask: str, memory: str, plan: str,
                revision: int) -> None:
        self.add(t, '/language_context', self.make(
            'lerobot_lang_msgs/msg/LanguageContext', header=self._header(t), task=task,
            subtask=subtask, memory=memory, plan=plan, revision=revision, source='planner'))

    def outcome(self, t: float, goal: str, success: bool) -> None:
        self.add(t, '/task_outcome', self.make(
            'lerobot_lang_msgs/msg/TaskOutcome', header=self._header(t), goal=goal,
            context_revision=1, success=success, known_goal=True))

    def write(self, out_dir: Path, storage: str = 'mcap') -> Path:
        writer = BagWriter(WriterSettings(out_dir, storage=storage), self.resolver)
        path = writer.start('synthetic')
        qos = (qos_from_fields('keep_last', 1, 'reliable', 'volatile'),)
        for topic, msgtype in TOPICS.items():
            writer.add_topic(TopicSpec(topic, msgtype, qos))
        for t, topic, msg in sorted(self.items, key=lambda x: x[0]):
            data = bytes(self.store.serialize_cdr(msg, TOPICS[topic]))
            assert writer.push(topic, int(round(t * 1e9)), data)
        writer.stop()
        return path


def standard_session(duration_s: float = 4.0, interjection_at: float = 1.52,
                     vqa_at: float = 2.5) -> Session:
    """An arm moving joint 0 linearly (radians = seconds since T0), cameras at 10 Hz whose
    pixel value is 5 x the image number, chunks every 0.5 s, a task, a subtask change, an
    interjection answered with speech and a new plan 0.2 s later, and a VQA exchange."""
    s = Session()
    period = 1 / 30
    n = int(duration_s * 30)
    # After the first, samples come 2-3 ms before the 30 / 10 Hz grid, so no sample time
    # equals a frame tick (which side of a tie a sample falls on would be float rounding).
    for i in range(n + 1):
        t = T0 + i * period - (0.002 if i else 0.0)
        q = np.zeros(len(JOINTS))
        q[0] = i * period
        s.joints(t, q)
    for k in range(int(duration_s * 10) + 1):
        for cam in ('front', 'wrist'):
            s.image(T0 + k * 0.1 - (0.003 if k else 0.0), cam, (k * 5) % 250)
    for c in range(int(duration_s * 2)):
        t = T0 + c * 0.5
        steps = np.zeros((15, len(JOINTS)))
        steps[:, 1] = c + np.arange(15) / 100.0  # joint 1 encodes chunk and step
        s.chunk(t + 0.01, steps, revision=1, period=period)
    task = 'put the red cube in the bowl'
    s.context(T0, task, 'reach the red cube', '', 'put the red cube in the bowl', 1)
    s.context(T0 + 1.0, task, 'grasp the red cube', 'reached the red cube',
              'put the red cube in the bowl', 1)
    s.string(T0 + interjection_at, '/interjection', 'use the blue cube instead')
    s.string(T0 + interjection_at + 0.2, '/speech', 'OK, I will put the blue cube in the bowl.')
    s.context(T0 + interjection_at + 0.2, task, 'grasp the red cube', 'reached the red cube',
              'put the blue cube in the bowl', 1)
    s.string(T0 + vqa_at, '/vqa_log', json.dumps({
        'question': 'what is in the gripper?', 'answer': 'nothing', 'camera': 'wrist',
        'success': True}))
    s.outcome(T0 + 0.5, task, False)
    return s
