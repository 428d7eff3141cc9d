"""Export recorded bags to a LeRobot v3.0 dataset with language columns; ROS-free.

LeRobot 0.6 writes the dataset itself (`LeRobotDataset.create` / `add_frame` /
`save_episode` / `finalize`: info.json, stats.json, tasks, episodes, data parquet, AV1 videos
through PyAV, streamed to an encoder thread per camera), and its annotation pipeline's
`LanguageColumnsWriter` adds the two language columns, as LeRobot's own annotation step
does. Everything is written into a hidden sibling folder that is renamed to the output folder
only once complete: a failed export leaves nothing behind. LeRobot (torch) is imported only
when an export runs.

Who commanded the arm: every frame gets `control_source` (policy, human, none: the last
/runtime_status at or before it; bags from before that field have it from the mode, action ->
policy, teleop -> human, paused or dry run -> none; bags without any runtime_status -> policy)
and `intervention` (True when a human commanded, as LeRobot's DAgger rollout writes it). Under
human control the action is the leader arm's pose (/leader/joint_states), not a policy chunk.
A teleoperated demonstration without any action chunk exports too: its action is the leader's
pose (and without runtime_status every frame is a human's).

Post-hoc language (``ExportOptions.annotate``, `lerobot-lang annotate`): a planner backend run
offline over the recording (recording/annotate.py) gives the subtask, plan and memory rows and
the speech answering the recorded interjections; they replace the recorded planner's
(/language_context, /speech) and enter where those would, so the rest of the export
(interjections, VQA, episodes) is unchanged.

Session clock: when the recorder's clock agrees with the publishers' header stamps (sim time
recorded with `use_sim_time`, or wall time on the real robot), stamped messages (images, joint
states, action chunks) are placed at their header stamp and the others at their receive time;
otherwise every message is placed at its receive time.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_lang_nodes.core import images
from lerobot_lang_nodes.recording import timeline
from lerobot_lang_nodes.recording.bag_reader import BagError, BagSet
from lerobot_lang_nodes.recording.language import LanguageLog, episode_rows
from lerobot_lang_nodes.recording.scheduling import scheduling_kept

logger = logging.getLogger(__name__)

EPISODES_BY = ('outcome', 'reset', 'task', 'whole', 'marks')
UNITS = ('radians', 'lerobot')
STATE_KEY = 'observation.state'
ACTION_KEY = 'action'
CAMERA_PREFIX = 'observation.images.'
# The topic on which the planner logs each VQA exchange (the /vqa service is invisible to a
# bag): std_msgs/String holding JSON {"question", "answer", "camera", "success", "stamp"}.
VQA_LOG_TOPIC = 'vqa_log'
IMAGE_TYPE = 'sensor_msgs/msg/Image'
COMPRESSED_TYPE = 'sensor_msgs/msg/CompressedImage'
# Header stamps and receive times closer than this (median) are taken to be one clock.
SAME_CLOCK_S = 1.0
# A joint jumping this far between two joint states < 0.25 s apart is a scene reset.
RESET_JUMP_RAD = 0.5
# Who commanded the arm (RuntimeStatus.control_source) and the mode it follows from in bags
# recorded before that field existed: teleop is a human, action the policy, paused nobody.
CONTROL_SOURCES = ('policy', 'human', 'none')
CONTROL_BY_MODE = {'action': 'policy', 'teleop': 'human', 'paused': 'none'}
INTERVENTION_KEY = 'intervention'
CONTROL_KEY = 'control_source'
LEADER_TOPIC = 'leader/joint_states'
# Episode boundaries an episodic recording marks (std_msgs/String, JSON): {"event": "episode",
# "index": i, "task": ...} starts episode i, {"event": "reset"} its reset phase, {"event":
# "label", "index": i, "success": bool} labels it, {"event": "discard", "index": i} drops it (a
# re-recorded episode), {"event": "stop"} ends the session. An optional "stamp" (seconds, the
# sender's ROS clock) places the mark where it was sent. With episodes_by='marks' the export
# cuts exactly there and writes the phase and outcome columns.
EPISODE_TOPIC = 'episode_event'
PHASE_KEY = 'phase'
OUTCOME_KEY = 'outcome'
# Frames per camera waiting for its video encoder (raw 640x480: 0.9 MB each).
ENCODER_QUEUE = 30


class ExportError(RuntimeError):
    """The export cannot run; the message says why and what to do. Nothing was written."""


@dataclass(frozen=True)
class ExportOptions:
    """What `lerobot-lang export` asks for."""

    fps: int = 30
    repo_id: str = 'local/lerobot_lang_session'
    units: str = 'radians'
    episodes_by: str = 'outcome'
    # episodes_by='marks': keep the reset phases (phase column 'reset') or leave them out.
    keep_resets: bool = False
    max_age_s: float = 0.5
    min_episode_s: float = 1.0
    reply_window_s: float = 10.0
    namespace: str = ''
    cameras: tuple[str, ...] = ()
    calibration: str = ''
    robot_type: str = 'so101_follower'
    # The JointState topic whose named values become observation.state: the arm's
    # joint_states, or the RoboCasa bridge's 16-D robot_state.
    state_topic: str = 'joint_states'
    # Post-hoc language (recording/annotate.py AnnotateOptions): a planner backend run
    # offline over the recording gives the subtask, plan and memory rows and the speech
    # answering interjections, replacing the recorded planner's; None: the recorded ones.
    annotate: Any = None

    def __post_init__(self) -> None:
        if not 1 <= self.fps <= 1000:
            raise ValueError(f'fps must be in [1, 1000], got {self.fps}')
        if self.units not in UNITS:
            raise ValueError(f'units is {self.units!r}; valid choices: {list(UNITS)}')
        if self.episodes_by not in EPISODES_BY:
            raise ValueError(f'episodes_by is {self.episodes_by!r}; valid choices: '
                             f'{list(EPISODES_BY)}')
        if self.max_age_s <= 0:
            raise ValueError(f'max_age_s must be > 0, got {self.max_age_s}')
        if not self.state_topic.strip('/'):
            raise ValueError('state_topic is empty; give the JointState topic of the state, '
                             'e.g. joint_states or robot_state')
        if '/' not in self.repo_id:
            raise ValueError(f'repo_id must look like <user>/<name>, got {self.repo_id!r}')


@dataclass
class ExportResult:
    """What was written."""

    root: Path
    episodes: int
    frames: int
    cameras: list[str]
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Camera:
    name: str
    topic: str
    msgtype: str
    times: list[float] = field(default_factory=list)
    shape: tuple[int, int, int] | None = None


@dataclass
class Session:
    """Everything the export needs from the bags, except the image pixels (streamed later)."""

    joint_names: tuple[str, ...] = ()
    joint_times: list[float] = field(default_factory=list)
    joints: list[np.ndarray] = field(default_factory=list)
    action_names: tuple[str, ...] = ()
    chunks: list[timeline.ChunkRecord] = field(default_factory=list)
    cameras: dict[str, _Camera] = field(default_factory=dict)
    tasks: list[tuple[float, str]] = field(default_factory=list)
    successes: list[tuple[float, bool, str]] = field(default_factory=list)
    resets: list[float] = field(default_factory=list)
    language: LanguageLog = field(default_factory=LanguageLog)
    header_clock: bool = True
    # (receive time, header stamp, control source) of each runtime_status.
    control: list[tuple[float, float, str]] = field(default_factory=list)
    # The leader arm's joint states (what a human commanded): times, names, positions.
    leader_times: list[float] = field(default_factory=list)
    leader: list[dict[str, float]] = field(default_factory=list)
    # (receive time, event dict) of each episode_event.
    marks: list[tuple[float, dict]] = field(default_factory=list)
    # (receive time, JSON text) of each sim/ground_truth, kept only for an annotation (the
    # text: an hour at 30 Hz parsed would hold gigabytes of dicts; a look parses its one).
    truth: list[tuple[float, str]] = field(default_factory=list)


def lerobot_state_units(joint_names: Sequence[str], calibration: str = '') -> Any:
    """The StateUnits of ``--units lerobot`` for SO-101 ``joint_names``: radians <-> LeRobot's
    units (degrees, gripper 0..100) with the arm's calibration (``calibration``: a LeRobot
    calibration id or JSON path) or, without one, the simulated arm's nominal calibration (its
    MJCF joint ranges). A trainer reading such a dataset converts back with the same one."""
    from lerobot_lang_nodes.backends.policies.lerobot_policy import (StateUnits,
                                                                   nominal_sim_calibration)
    from lerobot_lang_nodes.so101.calibration import load_calibration
    if calibration:
        is_path = calibration.endswith('.json') or os.sep in calibration
        cal = load_calibration(path=calibration) if is_path else load_calibration(calibration)
        return StateUnits(cal, 'degrees', order=joint_names)
    cal, zero = nominal_sim_calibration()
    return StateUnits(cal, 'degrees', order=joint_names, zero_rad=zero)


def control_source(mode: str, source: str = '', dry_run: bool = False) -> str:
    """Who commanded the arm according to one RuntimeStatus: its control_source, or for bags
    recorded before that field existed, the mode's (a dry run commands nothing)."""
    if source in CONTROL_SOURCES:
        return source
    if dry_run:
        return 'none'
    return CONTROL_BY_MODE.get(mode, 'policy')


def _header_stamp(raw: bytes) -> float:
    """builtin_interfaces/Time of a message that starts with a std_msgs/Header (CDR)."""
    fmt = '<iI' if raw[1] == 1 else '>iI'
    sec, nsec = struct.unpack_from(fmt, raw, 4)
    return sec + nsec * 1e-9


class Exporter:
    """One export: ``run()`` reads the bags twice (state, then pixels) and writes the dataset."""

    def __init__(self, bags: Sequence[str | Path], out_dir: str | Path,
                 options: ExportOptions = ExportOptions(),
                 progress: Callable[[int, int], Any] | None = None,
                 annotation_progress: Callable[[int, int], Any] | None = None) -> None:
        self.bag_paths = [Path(b) for b in bags]
        self.out_dir = Path(out_dir)
        self.opt = options
        self.progress = progress
        self.annotation_progress = annotation_progress
        self.warnings: list[str] = []
        self.control: np.ndarray = np.zeros(0, dtype=object)  # per tick, set by plan_frames
        # episodes_by='marks': per tick phase, outcome and task; the marks' cut times.
        self.phase = self.outcome = self.mark_task = np.zeros(0, dtype=object)
        self.mark_times: list[float] = []
        self.annotator: Any = None  # the planner backend of an annotation, once loaded
        self.annotation_planner: Any = None  # its HighLevelPlanner
        self.annotation_needs: tuple[bool, tuple[str, ...]] = (False, ())

    # -- topics ------------------------------------------------------------------------------

    def _name(self, relative: str) -> str:
        ns = self.opt.namespace.strip('/')
        return f'/{ns}/{relative}' if ns else f'/{relative}'

    def _find_cameras(self, topics: dict) -> dict[str, _Camera]:
        prefix = self._name('cameras/')
        found: dict[str, _Camera] = {}
        for name, topic in sorted(topics.items()):
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix):].split('/')
            cam = parts[0]
            if parts[1:] == ['image_raw'] and topic.msgtype == IMAGE_TYPE:
                found[cam] = _Camera(cam, name, topic.msgtype)
            elif (parts[1:] == ['image_raw', 'compressed'] and topic.msgtype == COMPRESSED_TYPE
                  and cam not in found):
                found[cam] = _Camera(cam, name, topic.msgtype)
        if self.opt.cameras:
            missing = [c for c in self.opt.cameras if c not in found]
            if missing:
                raise ExportError(f'camera(s) {missing} not in the bags; cameras recorded: '
                                  f'{sorted(found)}')
            found = {c: found[c] for c in self.opt.cameras}
        return found

    def _recorded(self, topics: dict, relative: str) -> bool:
        name = relative if relative.startswith('/') else self._name(relative)
        return topics.get(name) is not None and bool(topics[name].count)

    def _check_topics(self, bags: BagSet) -> tuple[dict, dict[str, _Camera]]:
        topics = bags.topics()
        cameras = self._find_cameras(topics)
        need = [self._name(self.opt.state_topic)]
        # A teleoperated demonstration has no policy chunks: the leader arm is the action.
        if not self._recorded(topics, LEADER_TOPIC):
            need.append(self._name('action_chunk'))
        missing = [t for t in need if not self._recorded(topics, t.lstrip('/'))]
        if missing or not cameras:
            what = missing + ([] if cameras else [self._name('cameras/<name>/image_raw')])
            have = ', '.join(f'{n} ({t.count})' for n, t in sorted(topics.items())) or 'none'
            raise ExportError(f'the bags lack {what}, which the export needs (state, action: '
                              'action chunks or the leader arm, and at least one camera); '
                              f'topics recorded (messages): {have}. '
                              'Record them (the recorder\'s default topics do), or set '
                              '--namespace if the graph ran in one')
        return topics, cameras

    # -- pass 1: everything but pixels -------------------------------------------------------

    def read_session(self, bags: BagSet) -> Session:
        """Decode states, actions, language and image stamps into a Session."""
        topics, cameras = self._check_topics(bags)
        s = Session(cameras=cameras)
        n = self._name
        by_topic = {c.topic: c for c in cameras.values()}
        wanted = [n(t) for t in (self.opt.state_topic, 'action_chunk', 'language_context', 'task',
                                 'interjection', 'speech', VQA_LOG_TOPIC, 'task_outcome',
                                 'sim/ground_truth', 'runtime_status', LEADER_TOPIC,
                                 EPISODE_TOPIC)]
        wanted += list(by_topic)
        raw_chunks: list[tuple[float, float, Any]] = []
        offsets: list[float] = []
        contexts: list[tuple[float, Any]] = []
        last_seed: Any = None
        for t_ns, topic, msgtype, raw in bags.messages(t for t in wanted if t in topics):
            t_log = t_ns / 1e9
            if topic in by_topic:
                by_topic[topic].times.append(_header_stamp(raw))
                if len(offsets) < 5000:
                    offsets.append(by_topic[topic].times[-1] - t_log)
                continue
            msg = bags.decode(raw, msgtype)
            if topic == n(self.opt.state_topic):
                if not s.joint_names:
                    s.joint_names = tuple(msg.name)
                if tuple(msg.name) != s.joint_names:
                    pos = dict(zip(msg.name, msg.position))
                    if not all(j in pos for j in s.joint_names):
                        continue
                    values = np.array([pos[j] for j in s.joint_names])
                else:
                    values = np.asarray(msg.position, dtype=np.float64)
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                s.joint_times.append(stamp)
                s.joints.append(values)
                offsets.append(stamp - t_log)
            elif topic == n('action_chunk'):
                raw_chunks.append((t_log, msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9,
                                   msg))
            elif topic == n('language_context'):
                contexts.append((t_log, msg))
            elif topic == n('task'):
                s.tasks.append((t_log, msg.data))
            elif topic == n('interjection'):
                s.language.interjections.append((t_log, msg.data))
            elif topic == n('speech'):
                if msg.data.strip():
                    s.language.speech.append((t_log, msg.data))
            elif topic == n(VQA_LOG_TOPIC):
                self._vqa(s, t_log, msg.data)
            elif topic == n('runtime_status'):
                source = control_source(msg.mode, getattr(msg, 'control_source', ''),
                                        bool(getattr(msg, 'dry_run', False)))
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                s.control.append((t_log, stamp, source))
            elif topic == n(EPISODE_TOPIC):
                try:
                    event = json.loads(msg.data)
                    event['event']
                except (ValueError, KeyError, TypeError):
                    self.warnings.append(f'{EPISODE_TOPIC} message ignored: {msg.data[:80]!r}')
                    continue
                # Cut where the sender marked, not where the recorder heard it (late under
                # load), when its stamp is on the bag's clock.
                stamp = event.get('stamp')
                if isinstance(stamp, (int, float)) and abs(stamp - t_log) < SAME_CLOCK_S:
                    t_log = float(stamp)
                s.marks.append((t_log, event))
            elif topic == n(LEADER_TOPIC):
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                s.leader_times.append(stamp if stamp > 0 else t_log)
                s.leader.append(dict(zip(msg.name, msg.position)))
            elif topic == n('task_outcome'):
                s.successes.append((t_log, bool(msg.success), msg.goal))
            elif topic == n('sim/ground_truth'):
                try:
                    seed = json.loads(msg.data).get('seed')
                except (ValueError, AttributeError):
                    seed = None
                if seed is not None and last_seed is not None and seed != last_seed:
                    s.resets.append(t_log)
                if self.annotation_needs[0]:
                    s.truth.append((t_log, msg.data))
                last_seed = seed if seed is not None else last_seed
        s.header_clock = bool(offsets) and abs(float(np.median(offsets))) < SAME_CLOCK_S
        if not s.header_clock:
            self.warnings.append('header stamps and receive times are on different clocks '
                                 '(recorder without use_sim_time in sim?): frames are placed '
                                 'at receive times')
            self._use_receive_times(s, bags)
        self._chunks(s, raw_chunks, contexts)
        self._contexts(s, contexts)
        if not s.control and not s.chunks:
            self.warnings.append('no runtime_status and no action chunk in the bags: every '
                                 'frame is marked as commanded by a human with the leader arm '
                                 '(control_source human)')
        elif not s.control:
            self.warnings.append('no runtime_status in the bags: every frame is marked as '
                                 'commanded by the policy (control_source policy)')
        task = self.task_override
        if task:
            s.tasks = [(float('-inf'), task)]
        if not s.resets:
            s.resets = self._joint_jumps(s)
        if not s.joints:
            raise ExportError(f'no usable {self.opt.state_topic} message in the bags')
        return s

    def _use_receive_times(self, s: Session, bags: BagSet) -> None:
        names = {self._name(self.opt.state_topic)} | {c.topic for c in s.cameras.values()}
        times: dict[str, list[float]] = {t: [] for t in names}
        for t_ns, topic, _type, _raw in bags.messages(names):
            times[topic].append(t_ns / 1e9)
        s.joint_times = times[self._name(self.opt.state_topic)][:len(s.joints)]
        for cam in s.cameras.values():
            cam.times = times[cam.topic]

    def _vqa(self, s: Session, t: float, text: str) -> None:
        try:
            data = json.loads(text)
            question, answer = str(data['question']), str(data['answer'])
            camera = str(data.get('camera') or '')
        except (ValueError, KeyError, TypeError) as exc:
            self.warnings.append(f'{VQA_LOG_TOPIC} message ignored ({exc}): {text[:80]!r}')
            return
        if data.get('success') is False or not answer:
            return
        stamp = data.get('stamp')  # the planner's clock when it answered, if on the bag's
        if isinstance(stamp, (int, float)) and abs(stamp - t) < SAME_CLOCK_S:
            t = float(stamp)
        if camera not in s.cameras:
            fallback = next(iter(s.cameras))
            self.warnings.append(f'VQA {question!r} names camera {camera!r}, not exported; '
                                 f'stored on {fallback!r}')
            camera = fallback
        s.language.vqa.append((t, CAMERA_PREFIX + camera, question, answer))

    def _chunks(self, s: Session, raw: list, contexts: list) -> None:
        ctx_t = [t for t, _ in contexts]
        # The executor drops chunks computed for a revision older than the context's
        # flush_revision (bags recorded before that field existed: than its revision).
        ctx_rev = [int(getattr(m, 'flush_revision', 0) or m.revision) for _, m in contexts]
        for t_log, stamp, msg in raw:
            names = tuple(msg.action_names)
            if not s.action_names:
                s.action_names = names
            horizon, dim = int(msg.horizon), int(msg.action_dim)
            if names != s.action_names or horizon * dim != len(msg.values) or horizon == 0:
                continue
            i = int(np.searchsorted(ctx_t, t_log, side='right')) - 1
            if i >= 0 and int(msg.context_revision) < ctx_rev[i]:
                continue
            start = stamp if (s.header_clock and stamp > 0) else t_log
            period = float(msg.control_period_s) or 1.0 / 30.0
            s.chunks.append(timeline.ChunkRecord(
                received=t_log, start=min(start, t_log), period=period,
                values=np.asarray(msg.values, dtype=np.float64).reshape(horizon, dim),
                revision=int(msg.context_revision)))
        if not s.chunks and not s.leader:
            raise ExportError('the bags hold no usable action_chunk message (none, or with '
                              'mismatched names / sizes)')
        if not s.chunks:  # a teleoperated demonstration: the leader's pose, in joint order
            s.action_names = s.joint_names

    def _contexts(self, s: Session, contexts: list) -> None:
        # With a planner's context in the bags, tasks (episode cuts and the task column) follow
        # it rather than the operator's /task message: the message comes a planner step before
        # the context that clears the old subtask and memory, and an episode cut at it would
        # start with a frame that holds the new task but the old task's language.
        if any(msg.task for _, msg in contexts):
            s.tasks.clear()
        prev = {'subtask': '', 'plan': '', 'memory': '', 'task': ''}
        for t, msg in contexts:
            for style in ('subtask', 'plan', 'memory'):
                value = getattr(msg, style)
                if value != prev[style]:
                    s.language.add_state(t, style, value)
                    prev[style] = value
            if msg.task != prev['task']:
                s.tasks.append((t, msg.task))
                prev['task'] = msg.task
        s.tasks.sort(key=lambda x: x[0])

    @staticmethod
    def _joint_jumps(s: Session) -> list[float]:
        out = []
        for i in range(1, len(s.joints)):
            dt = s.joint_times[i] - s.joint_times[i - 1]
            if dt < 0.25 and np.max(np.abs(s.joints[i] - s.joints[i - 1])) > RESET_JUMP_RAD:
                out.append(s.joint_times[i])
        return out

    # -- timeline ----------------------------------------------------------------------------

    def plan_frames(self, s: Session) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray,
                                               np.ndarray, list[tuple[int, int]]]:
        """Ticks, per-stream sample indices, states, actions and episode ranges."""
        order = np.argsort(s.joint_times, kind='stable')
        jt = np.asarray(s.joint_times)[order]
        joints = np.asarray(s.joints)[order]
        starts = [jt[0]] + [min(c.times) for c in s.cameras.values() if c.times]
        ends = [jt[-1]] + [max(c.times) for c in s.cameras.values() if c.times]
        if len(starts) != 1 + len(s.cameras):
            empty = [c.name for c in s.cameras.values() if not c.times]
            raise ExportError(f'camera(s) {empty} have no image in the bags')
        ticks = timeline.frame_ticks(max(starts), min(ends), self.opt.fps)
        idx = {'joints': timeline.sample_indices(jt, ticks, self.opt.max_age_s)}
        for cam in s.cameras.values():
            t = np.asarray(cam.times)
            if np.any(np.diff(t) < 0):
                raise ExportError(f'images on {cam.topic} go back in time; the recording is '
                                  'inconsistent')
            idx[cam.name] = timeline.sample_indices(t, ticks, self.opt.max_age_s)
        valid = np.all([v >= 0 for v in idx.values()], axis=0)
        states = np.where(valid[:, None], joints[np.clip(idx['joints'], 0, None)], np.nan)
        dim = len(s.action_names)
        actions = timeline.chunk_actions(s.chunks, ticks, dim)
        if set(s.action_names) == set(s.joint_names) and s.action_names != s.joint_names:
            perm = [s.action_names.index(j) for j in s.joint_names]
            actions = actions[:, perm]
            s.action_names = s.joint_names
        # Before the first chunk the robot holds where it is.
        if s.action_names == s.joint_names:
            hold = np.isnan(actions).any(axis=1)
            actions[hold] = states[hold]
        s_control = self._control_at(s, ticks)
        human = s_control == 'human'
        if human.any():
            # A human commands through the leader arm: its pose is the action, not the
            # policy's last chunk (held by the executor's queue only until the takeover).
            actions[human] = self._leader_actions(s, ticks[human])
        self.control = s_control
        if self.opt.episodes_by == 'marks':
            self._apply_marks(s, ticks, valid)
        valid &= ~np.isnan(actions).any(axis=1)
        cuts = self._cuts(s, ticks, valid)
        min_frames = max(1, int(round(self.opt.min_episode_s * self.opt.fps)))
        episodes = timeline.segments(valid, cuts, min_frames)
        if not episodes:
            raise ExportError(f'no episode of at least {self.opt.min_episode_s} s with every '
                              f'stream fresher than {self.opt.max_age_s} s (state, action, '
                              f'cameras {sorted(s.cameras)}) in the bags')
        return ticks, idx, states, actions, episodes

    def _apply_marks(self, s: Session, ticks: np.ndarray, valid: np.ndarray) -> None:
        """Phase, outcome and task per tick from the recorded episode events; frames outside
        an episode (before the first, after a stop, of a discarded episode, resets unless
        kept) are made invalid, so the export's episodes are exactly the marked ones."""
        if not s.marks:
            raise ExportError(f'--episodes-by marks needs {self._name(EPISODE_TOPIC)} in the '
                              'bags (an episodic recording: lerobot-lang record-episodes)')
        marks = sorted(s.marks, key=lambda m: m[0])
        labels: dict[int, bool] = {}
        discarded: set[int] = set()
        states: list[tuple[str, int, str]] = []  # (phase, episode index, task) after each
        phase, index, task = '', -1, ''
        for _t, event in marks:
            kind = event.get('event')
            if kind == 'episode':
                phase, index = 'episode', int(event.get('index', index + 1))
                task = str(event.get('task') or task)
            elif kind == 'reset':
                phase = 'reset'
            elif kind == 'stop':
                phase = ''
            elif kind == 'label':
                labels[int(event.get('index', index))] = bool(event.get('success'))
            elif kind == 'discard':
                discarded.add(int(event.get('index', index)))
            states.append((phase, index, task))
        times = np.array([t for t, _ in marks])
        at = np.searchsorted(times, ticks, side='right') - 1
        n = len(ticks)
        self.phase = np.array([states[i][0] if i >= 0 else '' for i in at], dtype=object)
        episode = np.array([states[i][1] if i >= 0 else -1 for i in at])
        self.mark_task = np.array([states[i][2] if i >= 0 else '' for i in at], dtype=object)
        in_episode = self.phase == 'episode'
        self.outcome = np.full(n, '', dtype=object)
        for i in np.flatnonzero(in_episode):
            label = labels.get(int(episode[i]))
            self.outcome[i] = 'unlabelled' if label is None else (
                'success' if label else 'failure')
        keep = in_episode & ~np.isin(episode, sorted(discarded))
        if self.opt.keep_resets:
            keep |= self.phase == 'reset'
        valid &= keep
        self.mark_times = [t for t, e in marks if e.get('event') in ('episode', 'reset', 'stop')]

    def _control_at(self, s: Session, ticks: np.ndarray) -> np.ndarray:
        """Control source per tick: the last runtime_status at or before it (the first one
        for ticks before any); policy everywhere when the bags hold none."""
        if not s.control:
            return np.full(len(ticks), 'policy' if s.chunks else 'human', dtype=object)
        times = np.array([stamp if (s.header_clock and stamp > 0) else t_log
                          for t_log, stamp, _ in s.control])
        order = np.argsort(times, kind='stable')
        sources = np.array([s.control[i][2] for i in order], dtype=object)
        i = np.searchsorted(times[order], ticks, side='right') - 1
        return sources[np.clip(i, 0, None)]

    def _leader_actions(self, s: Session, ticks: np.ndarray) -> np.ndarray:
        """The leader's pose (action order) at each tick; NaN where none is fresh, so those
        frames are left out rather than given an action nobody commanded."""
        out = np.full((len(ticks), len(s.action_names)), np.nan)
        if not s.leader:
            self.warnings.append(f'frames under human control but no {LEADER_TOPIC} in the '
                                 'bags: those frames have no action and are left out')
            return out
        order = np.argsort(s.leader_times, kind='stable')
        idx = timeline.sample_indices(np.asarray(s.leader_times)[order], ticks,
                                      self.opt.max_age_s)
        for row, i in enumerate(idx):
            if i < 0:
                continue
            pose = s.leader[order[i]]
            if all(name in pose for name in s.action_names):
                out[row] = [pose[name] for name in s.action_names]
        return out

    def _cuts(self, s: Session, ticks: np.ndarray, valid: np.ndarray) -> list[int]:
        mode = self.opt.episodes_by
        task_changes = [t for i, (t, task) in enumerate(s.tasks)
                        if i and task != s.tasks[i - 1][1]]
        if mode == 'whole':
            return []
        if mode == 'marks':
            return timeline.cut_indices(ticks, self.mark_times)
        if mode == 'task':
            return timeline.cut_indices(ticks, task_changes)
        if mode == 'reset':
            return timeline.cut_indices(ticks, s.resets)
        # outcome: an episode ends at its success; what follows until a new task is idle.
        edges: list[float] = []
        was = False
        for t, ok, _goal in s.successes:
            if ok and not was:
                edges.append(t)
            was = ok
        for edge in edges:
            nxt = [t for t in task_changes if t > edge]
            stop = nxt[0] if nxt else np.inf
            valid[(ticks >= edge) & (ticks < stop)] = False
        return timeline.cut_indices(ticks, edges + task_changes + s.resets)

    # -- post-hoc language (recording/annotate.py) ---------------------------------------------

    @property
    def task_override(self) -> str:
        return (self.opt.annotate.task.strip() if self.opt.annotate is not None else '')

    def load_annotator(self) -> None:
        """Build the annotation's planner backend (before any bag is read: a missing model
        fails at once)."""
        if self.opt.annotate is None or self.annotator is not None:
            return
        from lerobot_lang_nodes.recording import annotate
        try:
            self.annotator = annotate.load_generator(self.opt.annotate)
            # The planner's settings and prompt templates, checked before any bag is read.
            self.annotation_planner = annotate.build_planner(self.annotator, self.opt.annotate)
        except (annotate.AnnotationError, ValueError) as exc:
            raise ExportError(str(exc)) from exc
        self.annotation_needs = annotate.needs_of(self.annotator)

    def _annotation_tasks(self, s: Session) -> list[tuple[float, str]]:
        if self.task_override:
            return [(float('-inf'), self.task_override)]
        tasks = list(s.tasks) + [(t, str(e.get('task'))) for t, e in s.marks
                                 if e.get('event') == 'episode' and e.get('task')]
        return sorted(tasks, key=lambda x: x[0])

    def annotate_language(self, s: Session, ticks: np.ndarray) -> None:
        """Replace the session's subtask, plan and memory states and the planner's speech by
        the annotation's (the operator's interjections are kept, and answered again)."""
        from lerobot_lang_nodes.recording import annotate
        opt = self.opt.annotate
        wants_truth, cameras = self.annotation_needs
        if wants_truth and not s.truth:
            raise ExportError(
                f'the {opt.backend} planner decides from the simulator\'s ground truth '
                f'({self._name("sim/ground_truth")}), which the bags lack: record it (the '
                'recorder\'s default topics do, in simulation), or annotate from the camera '
                'images with a model backend (--planner-backend transformers or hierarchical)')
        missing = [c for c in cameras if c not in s.cameras]
        if missing:
            raise ExportError(
                f'the {opt.backend} planner looks at camera(s) {missing}, which are not among '
                f'the exported cameras {sorted(s.cameras)}: record them, add them to '
                '--cameras, or name the cameras the planner looks at (--planner-cameras)')
        tasks = self._annotation_tasks(s)
        if not any(task.strip() for _t, task in tasks):
            raise ExportError('nothing to annotate: the bags hold no task (no /task, language '
                              'context or episode task); give the task with --task')
        looks = timeline.frame_ticks(float(ticks[0]), float(ticks[-1]), annotate.rate_of(opt))
        streams = {}
        for name in cameras:
            cam = s.cameras[name]
            idx = timeline.sample_indices(np.asarray(cam.times), looks, self.opt.max_age_s)
            streams[name] = (idx, self._frames(cam, idx[idx >= 0]))
        truth_t = [t for t, _ in s.truth]
        order = np.argsort(s.joint_times, kind='stable')
        joint_t = np.asarray(s.joint_times)[order]

        def observe(k: int, t: float, language: Any) -> dict[str, Any]:
            images = {name: next(stream) for name, (idx, stream) in streams.items()
                      if idx[k] >= 0}
            i = int(np.searchsorted(truth_t, t, side='right')) - 1
            j = int(np.searchsorted(joint_t, t, side='right')) - 1
            truth = None
            if i >= 0:
                try:
                    truth = json.loads(s.truth[i][1])
                except ValueError:
                    self.warnings.append(f'annotation: ground truth at t={s.truth[i][0]:.3f} '
                                         's is not JSON; that look saw none')
            obs: dict[str, Any] = {'images': images, 'language': language, 'time_s': t,
                                   'ground_truth': truth}
            if j >= 0:
                obs['joint_names'] = list(s.joint_names)
                obs['joint_positions'] = np.asarray(s.joints[order[j]])
            return obs

        planner = self.annotation_planner
        try:
            result = annotate.annotate(planner, looks, tasks, list(s.resets) + [
                t for t, e in s.marks if e.get('event') == 'episode'], observe,
                self.annotation_progress, s.language.interjections)
        finally:
            for _idx, stream in streams.values():
                stream.close()
        failed = sum(result.failures.values())
        if result.looks and planner.failures.get('subtask', 0) >= result.looks:
            raise ExportError(f'every one of the {result.looks} subtask generations of the '
                              f'{opt.backend} planner failed (its log says why)')
        if failed:
            self.warnings.append(f'annotation: {failed} failed generation(s) '
                                 f'{result.failures} of {result.looks} looks; the previous '
                                 'text stayed')
        if s.language.states or s.language.speech:
            self.warnings.append(f'annotation: the recorded planner\'s language '
                                 f'({len(s.language.states)} subtask, plan and memory changes, '
                                 f'{len(s.language.speech)} speech) is replaced by the '
                                 f'{opt.backend} planner\'s')
        s.language.states = result.states
        s.language.speech = result.speech

    # -- pass 2 and writing ------------------------------------------------------------------

    def _frames(self, cam: _Camera, wanted: np.ndarray) -> Iterator[np.ndarray]:
        """The decoded image for each index in ``wanted`` (non-decreasing), in order.

        Each camera reads the bags through its own readers: one reader's file position must
        not be shared by interleaved iterations.
        """
        with BagSet(self.bag_paths) as bags:
            it = bags.messages([cam.topic])
            pos, raw, msgtype = -1, b'', cam.msgtype
            cache: tuple[int, np.ndarray] | None = None
            for target in wanted:
                while pos < target:
                    try:
                        _t, _topic, msgtype, raw = next(it)
                    except StopIteration:
                        raise ExportError(f'{cam.topic} ended before image {target}') from None
                    pos += 1
                if cache is None or cache[0] != pos:
                    cache = (pos, self._decode_image(bags, cam, raw, msgtype))
                yield cache[1]

    def _decode_image(self, bags: BagSet, cam: _Camera, raw: bytes, msgtype: str
                      ) -> np.ndarray:
        msg = bags.decode(raw, msgtype)
        try:
            if msgtype == IMAGE_TYPE:
                rgb = images.to_rgb(msg.encoding, msg.height, msg.width, msg.step,
                                    bytes(msg.data))
            else:
                import io

                from PIL import Image as PilImage
                rgb = np.asarray(PilImage.open(io.BytesIO(bytes(msg.data))).convert('RGB'))
        except (images.ImageFormatError, OSError, ValueError) as exc:
            raise ExportError(f'an image on {cam.topic} cannot be decoded: {exc}') from exc
        if cam.shape is None:
            cam.shape = rgb.shape
        elif rgb.shape != cam.shape:
            raise ExportError(f'{cam.topic} changes image size from {cam.shape} to {rgb.shape}; '
                              'a LeRobot video has one size')
        return rgb

    def _converter(self, s: Session) -> Callable[[np.ndarray], np.ndarray]:
        if self.opt.units == 'radians':
            return lambda v: v
        from lerobot_lang_nodes.so101.calibration import JOINT_NAMES
        if set(s.joint_names) - set(JOINT_NAMES):
            raise ExportError(f'--units lerobot converts SO-101 joints {list(JOINT_NAMES)}; the '
                              f'bags have {list(s.joint_names)}')
        conv = lerobot_state_units(s.joint_names, self.opt.calibration)
        return lambda v: conv.to_lerobot(v)

    def run(self) -> ExportResult:
        """Read, resample and write; the output folder appears only when complete."""
        out = self.out_dir
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ExportError(f'output folder {out} exists and is not empty; choose a new '
                              'folder or remove it')
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f'.{out.name}.partial-', dir=out.parent))
        try:
            result = self._export(work / 'dataset', work / 'staging')
            if out.exists():
                out.rmdir()
            os.replace(work / 'dataset', out)
            result.root = out
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)
            close = getattr(self.annotator, 'close', None)
            if callable(close):
                close()

    def _export(self, root: Path, staging: Path) -> ExportResult:
        with scheduling_kept():  # AV1 encoding as root leaves the thread real-time otherwise
            return self._export_kept(root, staging)

    def _export_kept(self, root: Path, staging: Path) -> ExportResult:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        self.load_annotator()
        try:
            with BagSet(self.bag_paths) as bags:
                self.warnings += bags.warnings
                s = self.read_session(bags)
                ticks, idx, states, actions, episodes = self.plan_frames(s)
                if self.annotator is not None:
                    self.annotate_language(s, ticks)
                convert = self._converter(s)
                self._probe_shapes(s, idx)
                names = [f'{j}.pos' for j in s.joint_names] if self.opt.units == 'lerobot' \
                    else list(s.joint_names)
                act_names = [f'{j}.pos' for j in s.action_names] \
                    if self.opt.units == 'lerobot' else list(s.action_names)
                features = {
                    STATE_KEY: {'dtype': 'float32', 'shape': (len(names),), 'names': names},
                    ACTION_KEY: {'dtype': 'float32', 'shape': (len(act_names),),
                                 'names': act_names},
                }
                # As LeRobot's DAgger rollout writes it: True while a human commands.
                features[INTERVENTION_KEY] = {'dtype': 'bool', 'shape': (1,), 'names': None}
                features[CONTROL_KEY] = {'dtype': 'string', 'shape': (1,), 'names': None}
                marks = self.opt.episodes_by == 'marks'
                if marks:  # episode / reset, and success / failure / unlabelled
                    features[PHASE_KEY] = {'dtype': 'string', 'shape': (1,), 'names': None}
                    features[OUTCOME_KEY] = {'dtype': 'string', 'shape': (1,), 'names': None}
                for cam in s.cameras.values():
                    features[CAMERA_PREFIX + cam.name] = {
                        'dtype': 'video', 'shape': cam.shape,
                        'names': ['height', 'width', 'channels']}
                # Streaming encoding: each camera's frames go straight to its AV1 encoder
                # thread (PyAV releases the GIL) while this thread reads the next ones, instead
                # of a PNG per frame and per camera encoded again after the episode.
                ds = LeRobotDataset.create(self.opt.repo_id, self.opt.fps, features,
                                           root=root, robot_type=self.opt.robot_type,
                                           use_videos=True, streaming_encoding=True,
                                           encoder_queue_maxsize=ENCODER_QUEUE)
                encoder = ds.writer._streaming_encoder  # lerobot is pinned (0.6.1)
                keep = np.concatenate([np.arange(a, b) for a, b in episodes])
                streams = {c.name: self._frames(c, idx[c.name][keep])
                           for c in s.cameras.values()}
                task_t = [t for t, _ in s.tasks]
                for a, b in episodes:
                    for i in range(a, b):
                        j = int(np.searchsorted(task_t, ticks[i], side='right')) - 1
                        # Frames before the first task message (latched topics reach the
                        # recorder after it subscribes) belong to the first task.
                        task = (s.tasks[max(j, 0)][1] if s.tasks else '') or 'unspecified task'
                        if marks and self.mark_task[i] and not self.task_override:
                            task = str(self.mark_task[i])
                        frame = {STATE_KEY: np.asarray(convert(states[i]), dtype=np.float32),
                                 ACTION_KEY: np.asarray(convert(actions[i]), dtype=np.float32),
                                 INTERVENTION_KEY: np.array([self.control[i] == 'human']),
                                 CONTROL_KEY: str(self.control[i]),
                                 'task': task}
                        if marks:
                            frame[PHASE_KEY] = str(self.phase[i])
                            frame[OUTCOME_KEY] = str(self.outcome[i])
                        for name, stream in streams.items():
                            frame[CAMERA_PREFIX + name] = next(stream)
                        _wait_for_encoder(encoder)
                        ds.add_frame(frame)
                        if self.progress is not None:
                            self.progress(1, len(keep))
                    dropped = dict(encoder._dropped_frames)
                    if any(dropped.values()):
                        raise ExportError(f'the video encoder dropped frames {dropped}')
                    # Sequential encoding: forking a process that runs threads (a ROS
                    # probe, a progress bar) can deadlock, and 2 cores gain little.
                    ds.save_episode(parallel_encoding=False)
                ds.finalize()
                for stream in streams.values():
                    stream.close()
        except BagError as exc:
            raise ExportError(str(exc)) from exc
        frames = int(sum(b - a for a, b in episodes))
        self._write_language(root, staging, s, ticks, episodes)
        return ExportResult(root, len(episodes), frames, sorted(s.cameras), self.warnings)

    def _probe_shapes(self, s: Session, idx: dict[str, np.ndarray]) -> None:
        for cam in s.cameras.values():
            first = int(idx[cam.name][idx[cam.name] >= 0][0])
            frames = self._frames(cam, np.array([first]))
            next(frames)
            frames.close()

    def _write_language(self, root: Path, staging: Path, s: Session, ticks: np.ndarray,
                        episodes: list[tuple[int, int]]) -> None:
        from lerobot.annotations.steerable_pipeline.reader import iter_episodes
        from lerobot.annotations.steerable_pipeline.staging import EpisodeStaging
        from lerobot.annotations.steerable_pipeline.validator import StagingValidator
        from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter
        from lerobot.datasets.io_utils import load_info, write_info
        from lerobot.datasets.language import SAY_TOOL_SCHEMA, language_feature_info

        records = sorted(iter_episodes(root), key=lambda r: r.episode_index)
        if len(records) != len(episodes):
            raise ExportError(f'LeRobot wrote {len(records)} episodes, expected {len(episodes)}')
        frame_times = np.concatenate([ticks[a:b] for a, b in episodes])
        offsets = np.cumsum([0] + [b - a for a, b in episodes])
        ranges = [(int(offsets[k]), int(offsets[k + 1])) for k in range(len(episodes))]
        rows, warnings = episode_rows(s.language, frame_times, ranges,
                                      [r.frame_timestamps for r in records],
                                      self.opt.reply_window_s)
        self.warnings += warnings
        for record, staged in zip(records, rows):
            stage = EpisodeStaging(staging, record.episode_index)
            for module, module_rows in staged.items():
                stage.write(module, module_rows)
        cams = tuple(CAMERA_PREFIX + c for c in s.cameras)
        report = StagingValidator(dataset_camera_keys=cams).validate(records, staging)
        for error in report.errors:
            # LeRobot's generated VQA answers are JSON (bbox, count, ...); a planner's answers
            # are free text, which the loader and the recipes accept.
            if 'VQA assistant' in error:
                continue
            self.warnings.append(f"LeRobot's annotation validator: {error}")
        LanguageColumnsWriter().write_all(records, staging, root)
        info = load_info(root)
        info.features = {**info.features, **language_feature_info()}
        tools = [t for t in (info.tools or [])
                 if (t.get('function') or {}).get('name') != 'say']
        info.tools = [*tools, SAY_TOOL_SCHEMA]
        write_info(info, root)


def _wait_for_encoder(encoder: Any) -> None:
    """Back-pressure: LeRobot's streaming encoder drops a frame its full queue cannot take
    within 0.1 s (right for a live camera); an export waits for room instead."""
    queues = list(encoder._frame_queues.values())
    while any(q.qsize() >= ENCODER_QUEUE - 1 for q in queues):
        time.sleep(0.002)


def export(bags: Sequence[str | Path], out_dir: str | Path,
           options: ExportOptions = ExportOptions(),
           progress: Callable[[int, int], Any] | None = None,
           annotation_progress: Callable[[int, int], Any] | None = None) -> ExportResult:
    """Export ``bags`` to a new LeRobot dataset at ``out_dir`` (see module doc);
    ``progress`` counts frames written, ``annotation_progress`` the annotation's looks."""
    return Exporter(bags, out_dir, options, progress, annotation_progress).run()
