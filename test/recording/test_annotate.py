"""Post-hoc language (`lerobot-lang annotate`): a teleoperated demonstration recorded by the
real `recorder` node (its own process, over DDS) without any planner, then annotated offline
by a planner backend; the dataset, loaded by LeRobot 0.6.1, carries the subtasks and memory
of the demonstration. The offline pass itself (recording/annotate.py) is tested without DDS."""

from __future__ import annotations

import copy
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.testing import planner_config
from lerobot_lang_nodes.backends.planners.scripted import ScriptedPlanner
from lerobot_lang_nodes.recording import annotate

sys.path.insert(0, str(Path(__file__).parent))
import synthetic  # noqa: E402
from synthetic import standard_session  # noqa: E402

MODULE = 'lerobot_lang_nodes.nodes.recorder_node'
FPS = 15
JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']
TASK = 'put the red cube in the bowl'
PHASE_FRAMES = 20  # frames of each phase of the demonstration
# What the scripted planner answers in each phase of the demonstration below.
SUBTASKS = ['reach the red cube', 'grasp the red cube', 'lift the red cube',
            'move the red cube over the bowl']
# In a fifth phase (the cube still held up) the operator interjects.
INTERJECTION = 'use the blue cube instead'
PHASES = len(SUBTASKS) + 1


@pytest.fixture(scope='module')
def base_truth():
    """Ground truth of the real MuJoCo scene (seed 0); the phases edit copies of it."""
    import os
    os.environ.setdefault('MUJOCO_GL', 'egl')
    from lerobot_lang_nodes.sim.scene import So101Scene
    scene = So101Scene(seed=0)
    try:
        return scene.ground_truth()
    finally:
        scene.close()


def phase_truth(base: dict, phase: int) -> dict:
    """The world in each phase of a human's demonstration: the gripper far from the cube,
    open around it, closed on it on the table, holding it lifted."""
    t = copy.deepcopy(base)
    cube = t['objects']['red_cube']
    grip = t['gripper']
    grip['opening_speed'] = 0.0
    if phase >= 1:
        grip['grasp_point'] = list(cube['position'])
        grip['opening_rad'] = 1.0
    if phase >= 2:
        cube['in_gripper'], cube['on_table'] = True, False
        grip['opening_rad'] = 0.3
    if phase >= 3:
        cube['position'][2] = t['table_height'] + 0.08
        grip['grasp_point'] = list(cube['position'])
    return t


# --- the offline pass, on its own ----------------------------------------------------------
def _planner(**cfg):
    gen = ScriptedPlanner()
    return annotate.build_planner(gen, annotate.AnnotateOptions(
        planner=types.SimpleNamespace(**cfg)))


def test_the_pass_follows_the_world_at_the_planner_rate(base_truth):
    ticks = np.arange(0.0, 4.0, 0.25)  # 4 Hz over 4 s: a phase per second
    seen = []

    def observe(k, t, language):
        seen.append((k, t, language.task))
        return {'ground_truth': phase_truth(base_truth, int(t)), 'language': language}

    counted = []
    out = annotate.annotate(_planner(), ticks, [(0.5, TASK)], [], observe,
                            progress=lambda n, total: counted.append((n, total)))
    assert out.looks == len(ticks) and not out.failures
    assert counted == [(1, len(ticks))] * len(ticks)
    assert [(t, c) for t, s, c in out.states if s == 'subtask'] == [
        (0.0, SUBTASKS[0]), (1.0, SUBTASKS[1]), (2.0, SUBTASKS[2]), (3.0, SUBTASKS[3])]
    # Memory is written when the subtask changes, at the same look.
    assert [(t, c) for t, s, c in out.states if s == 'memory'] == [
        (1.0, 'reached the red cube'), (2.0, 'reached the red cube; the red cube is grasped'),
        (3.0, 'reached the red cube; the red cube is grasped; the red cube is lifted')]
    # The first task holds before its message (the recorder subscribed after it was latched).
    assert seen[0] == (0, 0.0, TASK)


def test_a_reset_starts_the_task_over_and_no_task_means_no_look(base_truth):
    ticks = np.arange(0.0, 4.0, 0.5)

    def observe(_k, t, language):
        # Reached, then held; at 2 s a new scene: the cube back on the table.
        phase = 0 if t < 1.0 else 2 if t < 2.0 else 0
        return {'ground_truth': phase_truth(base_truth, phase), 'language': language}

    out = annotate.annotate(_planner(), ticks, [(0.0, TASK)], [2.0], observe)
    assert [(t, s, c) for t, s, c in out.states if t >= 1.0] == [
        (1.0, 'subtask', SUBTASKS[2]), (1.0, 'memory', 'reached the red cube'),
        (2.0, 'subtask', SUBTASKS[0]), (2.0, 'memory', '')]
    kept = annotate.annotate(_planner(), ticks, [(0.0, TASK)], [], observe)
    assert (2.0, 'memory', '') not in kept.states  # without the reset the memory stays
    none = annotate.annotate(_planner(), ticks, [(0.0, '')], [], observe)
    assert none.looks == 0 and none.states == []


def test_interjections_are_answered_again_at_the_next_look(base_truth):
    ticks = np.arange(0.0, 2.0, 0.5)
    looked = []

    def observe(k, t, language):
        looked.append(k)
        return {'ground_truth': phase_truth(base_truth, 0), 'language': language}

    out = annotate.annotate(_planner(), ticks, [(0.0, TASK)], [], observe,
                            interjections=[(0.7, INTERJECTION), (0.9, 'hello there')])
    assert looked == [0, 1, 2, 3]  # once per tick: the image streams advance with it
    assert out.speech == [(0.7, 'OK, I will put the blue cube in the bowl instead.'),
                          (0.9, 'Sorry, I can only change which cube to use, e.g. "use the '
                                'blue cube instead".')]
    # Answered at the tick after it (1.0 s): the new plan and its first subtask.
    assert [(t, s, c) for t, s, c in out.states if t == 1.0] == [
        (1.0, 'subtask', 'reach the blue cube'), (1.0, 'plan', 'put the blue cube in the bowl'),
        (1.0, 'memory', 'reached the red cube')]  # the scripted planner's note of the change


def test_unknown_backends_and_missing_models_are_refused_clearly(tmp_path):
    with pytest.raises(annotate.AnnotationError, match=r"unknown planner backend 'gpt'; known: "
                                                       r"\['hierarchical', 'scripted'"):
        annotate.load_generator(annotate.AnnotateOptions(backend='gpt'))
    for backend in annotate.MODEL_BACKENDS:
        with pytest.raises(annotate.AnnotationError, match=f'the {backend} planner backend '
                                                           'needs a model.*--planner-model'):
            annotate.load_generator(annotate.AnnotateOptions(backend=backend))
    with pytest.raises(annotate.AnnotationError, match=r"failed to load from '.*nowhere'.*"
                                                       'does not exist'):
        annotate.load_generator(annotate.AnnotateOptions(
            backend='transformers',
            planner=planner_config(model_path=str(tmp_path / 'nowhere'))))
    assert annotate.needs_of(ScriptedPlanner()) == (True, ())


# --- a recorded teleoperated demonstration, annotated -----------------------------------------
@pytest.fixture
def demonstration(launch_node, probe, tmp_path, base_truth):
    """A human demonstrates the task with the leader arm; no planner and no policy run: the
    recorder gets cameras, joint states, the leader, runtime_status (control_source human),
    the task and the simulator's ground truth, which moves through four phases, then holds
    while the operator interjects."""
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    from lerobot_lang_msgs.msg import RuntimeStatus
    from lerobot_lang_nodes.nodes import qos
    from lerobot_lang_nodes.testing import wait_until

    out = tmp_path / 'bags'
    proc = launch_node(MODULE, params={
        'output_dir': str(out), 'cameras': ['front'], 'flush_period_s': 0.2,
        'topics': ['joint_states', 'runtime_status', 'task', 'interjection',
                   'sim/ground_truth']})
    pubs = {
        'image': probe.publisher(Image, 'cameras/front/image_raw', qos.SENSOR),
        'joints': probe.publisher(JointState, 'joint_states', qos.SENSOR),
        'leader': probe.publisher(JointState, 'leader/joint_states', qos.SENSOR),
        'status': probe.publisher(RuntimeStatus, 'runtime_status', qos.STATUS),
        'truth': probe.publisher(String, 'sim/ground_truth', qos.SENSOR),
        'task': probe.publisher(String, 'task', qos.LATCHED),
        'interjection': probe.publisher(String, 'interjection', qos.COMMAND),
    }
    pubs['task'].publish(String(data=TASK))
    wait_until(lambda: all(p.get_subscription_count() for p in pubs.values()), 30.0,
               'the recorder subscribed', [proc])
    clock = probe.node.get_clock()
    truths = [json.dumps(phase_truth(base_truth, p)) for p in range(len(SUBTASKS))]
    period = 1.0 / FPS
    start = time.monotonic()
    for k in range(PHASE_FRAMES * PHASES):
        delay = start + k * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        phase = min(k // PHASE_FRAMES, len(SUBTASKS) - 1)
        if k == PHASE_FRAMES * len(SUBTASKS):
            pubs['interjection'].publish(String(data=INTERJECTION))
        stamp = clock.now().to_msg()
        status = RuntimeStatus(mode='teleop', control_source='human', control_period_s=period)
        status.header.stamp = stamp
        pubs['status'].publish(status)
        pubs['truth'].publish(String(data=truths[phase]))
        # Each phase looks different to a camera.
        image = Image(height=48, width=64, encoding='rgb8', step=192,
                      data=np.full(48 * 192, 40 + 50 * phase, dtype=np.uint8).tobytes())
        image.header.stamp = stamp
        pubs['image'].publish(image)
        pose = [0.02 * k] * 6
        for name in ('joints', 'leader'):
            state = JointState(name=JOINTS, position=pose)
            state.header.stamp = stamp
            pubs[name].publish(state)
    assert proc.stop() == 0
    (bag,) = sorted(p for p in out.iterdir() if p.is_dir())
    return bag


def _language(root, repo_id):
    """Per frame: its timestamp and the subtask and memory active at it."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset(repo_id, root=root, video_backend='pyav')
    rows = ds[0]['language_persistent']  # LeRobot repeats an episode's rows on every frame
    frames = []
    for i in range(len(ds)):
        ts = float(ds.hf_dataset[i]['timestamp'])
        active = {style: [r['content'] for r in sorted(rows, key=lambda r: r['timestamp'])
                          if r['style'] == style and r['timestamp'] <= ts + 1e-6]
                  for style in ('subtask', 'memory')}
        frames.append({style: (v[-1] if v else None) for style, v in active.items()})
    return ds, rows, frames


def _events(root):
    """{frame index: its language_events} of the frames that have any."""
    import pyarrow.parquet as pq
    rows = pq.read_table(root / 'data/chunk-000/file-000.parquet').to_pylist()
    return {r['frame_index']: r['language_events'] for r in rows if r['language_events']}


def _runs(values):
    return [(i, v) for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def test_a_teleoperated_demonstration_gets_the_scripted_planners_subtasks(demonstration,
                                                                         tmp_path):
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot')
    from lerobot_lang_nodes.cli.main import main
    from lerobot_lang_nodes.recording.dataset import ExportOptions, export

    common = ['--fps', str(FPS), '--episodes-by', 'whole', '--min-episode', '0.5',
              '--no-progress']
    # The recording alone: frames and the leader's actions, but no language.
    plain = export([demonstration], tmp_path / 'plain',
                   ExportOptions(fps=FPS, repo_id='test/plain', episodes_by='whole',
                                 min_episode_s=0.5))
    _ds, rows, _frames = _language(plain.root, 'test/plain')
    assert rows == []
    ((_frame, events),) = _events(plain.root).items()  # the interjection, unanswered
    assert [e['style'] for e in events] == ['interjection']

    assert main(['annotate', str(demonstration), str(tmp_path / 'annotated'),
                 '--repo-id', 'test/annotated', '--planner-backend', 'scripted',
                 '--rate', '5', *common]) == 0
    ds, rows, frames = _language(tmp_path / 'annotated', 'test/annotated')
    first = ds[0]
    assert first['task'] == TASK and first['control_source'] == 'human'
    assert bool(first['intervention'])
    assert np.allclose(first['action'].numpy(), first['observation.state'].numpy())  # leader
    assert 'language_events' in first
    subtasks = _runs([f['subtask'] for f in frames])
    # The interjection re-plans onto the blue cube, which is still on the table.
    assert [v for _i, v in subtasks] == SUBTASKS + ['reach the blue cube'], subtasks
    # Each subtask starts with its phase: at the planner's first look (5 Hz: every 3 frames at
    # 15 fps) after the world changed, give or take a frame the recording may miss. The
    # ground truth and the interjection are unstamped, placed at their arrival at the
    # recorder: on a loaded machine up to a few hundred milliseconds after their frame.
    for (i, _v), phase in zip(subtasks[1:], range(1, PHASES)):
        assert phase * PHASE_FRAMES - 2 <= i <= phase * PHASE_FRAMES + 9, subtasks
    memory = _runs([f['memory'] for f in frames])
    assert [v for _i, v in memory[:4]] == [
        None, 'reached the red cube', 'reached the red cube; the red cube is grasped',
        'reached the red cube; the red cube is grasped; the red cube is lifted'], memory
    assert [i for i, _v in memory[1:]] == [i for i, _v in subtasks[1:]]
    # The interjection's frame holds it, the planner's spoken reply and its new plan; the new
    # subtask follows at the look that answered it (the next, within 3 frames).
    (frame, events), = _events(tmp_path / 'annotated').items()
    assert 0 <= subtasks[-1][0] - frame <= 3, (frame, subtasks)
    assert {(e['role'], e['style'], e['content']) for e in events} == {
        ('user', 'interjection', INTERJECTION), ('assistant', None, None)}
    say = next(e for e in events if e['role'] == 'assistant')['tool_calls'][0]['function']
    assert say == {'name': 'say', 'arguments': {
        'text': 'OK, I will put the blue cube in the bowl instead.'}}
    plans = [(r['content'], r['timestamp']) for r in rows if r['style'] == 'plan']
    assert plans == [('put the blue cube in the bowl', pytest.approx(frame / FPS, abs=1e-4))]


def test_the_annotation_refuses_a_recording_without_what_the_backend_needs(tmp_path, capsys):
    """A synthetic bag (no DDS) without the simulator's ground truth: the scripted planner
    cannot decide; an unknown backend, a missing model and a bad prompts file are refused
    before any bag is read. Nothing is written."""
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot')
    from lerobot_lang_nodes.cli.main import main

    bag = standard_session().write(tmp_path / 'bags')
    assert main(['annotate', str(bag), str(tmp_path / 'out'), '--no-progress']) == 1
    err = capsys.readouterr().err
    assert "the scripted planner decides from the simulator's ground truth " \
           "(/sim/ground_truth), which the bags lack" in err, err
    assert not (tmp_path / 'out').exists()
    assert main(['annotate', str(bag), str(tmp_path / 'out'), '--planner-backend',
                 'transformers']) == 1
    assert 'needs a model: give its checkpoint (--planner-model PATH' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(['annotate', str(bag), str(tmp_path / 'out'), '--planner-backend', 'gpt'])
    assert "invalid choice: 'gpt'" in capsys.readouterr().err
    bad = tmp_path / 'prompts.yaml'
    bad.write_text('subtask_user: [not, a, template]\n')
    assert main(['annotate', str(bag), str(tmp_path / 'out'), '--planner-param',
                 f'prompts_file={bad}']) == 1
    assert f"prompts file '{bad}': unknown key(s) ['subtask_user']" in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def test_each_episode_of_an_episodic_recording_starts_its_task_over(tmp_path, monkeypatch,
                                                                     base_truth):
    """An episodic recording (synthetic bag, no DDS): episode 0 reaches the cube, episode 1
    starts on a scene the human set back by hand (no simulator reset). Its language starts
    over with the episode: the first subtask again, no memory of episode 0. --task replaces
    the marks' task in the planner and in the task column."""
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot')
    import pyarrow.parquet as pq

    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    monkeypatch.setitem(synthetic.TOPICS, '/episode_event', 'std_msgs/msg/String')
    monkeypatch.setitem(synthetic.TOPICS, '/sim/ground_truth', 'std_msgs/msg/String')
    bag = synthetic.Session()
    t0 = synthetic.T0
    for i in range(4 * 30 + 1):  # joints at 30 Hz, the camera at 10 Hz, chunks at 2 Hz
        bag.joints(t0 + i / 30 - (0.002 if i else 0.0), np.zeros(len(JOINTS)))
    for k in range(41):
        bag.image(t0 + k * 0.1 - (0.003 if k else 0.0), 'front', 100)
    for c in range(8):
        bag.chunk(t0 + c * 0.5 + 0.01, np.zeros((15, len(JOINTS))), revision=1, period=1 / 30)
    for k in range(40):  # reached in episode 0 from 1 s on; the cube back from 2 s on
        bag.string(t0 + k * 0.1 - 0.001, '/sim/ground_truth',
                   json.dumps(phase_truth(base_truth, 1 if 10 <= k < 20 else 0)))
    for t, event in ((0.0, {'event': 'episode', 'index': 0, 'task': TASK}),
                     (1.8, {'event': 'reset', 'index': 0}),
                     (2.0, {'event': 'episode', 'index': 1, 'task': TASK}),
                     (3.95, {'event': 'stop'})):
        bag.string(t0 + t, '/episode_event', json.dumps(event))
    path = bag.write(tmp_path / 'bags')

    task = 'pick up the red cube'
    result = export([path], tmp_path / 'dataset', ExportOptions(
        fps=10, repo_id='test/episodic', episodes_by='marks', min_episode_s=0.5,
        cameras=('front',),
        annotate=annotate.AnnotateOptions(rate_hz=5.0, task=task)))
    rows = pq.read_table(result.root / 'data/chunk-000/file-000.parquet').to_pylist()
    episodes = {}
    for r in rows:
        episodes.setdefault(r['episode_index'], []).append(r)
    assert sorted(episodes) == [0, 1]
    language = {e: sorted((p['style'], p['content'], round(p['timestamp'], 3))
                          for p in frames[0]['language_persistent'])
                for e, frames in episodes.items()}
    assert language == {
        0: [('memory', 'reached the red cube', 1.0), ('subtask', 'grasp the red cube', 1.0),
            ('subtask', 'reach the red cube', 0.0)],
        1: [('subtask', 'reach the red cube', 0.0)]}
    tasks = pq.read_table(result.root / 'meta/tasks.parquet').to_pandas()
    assert list(tasks.index) == [task]


@pytest.mark.slow
def test_a_vision_language_planner_annotates_from_the_recorded_images(demonstration, tmp_path,
                                                                      monkeypatch, capsys):
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot', 'transformers')
    from lerobot_lang_nodes.cli.main import main
    from lerobot_lang_nodes.tiny_models import vlm

    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    model = vlm.build_tiny_vlm(tmp_path / 'vlm', SUBTASKS + [TASK])  # random weights
    args = ['--fps', str(FPS), '--episodes-by', 'whole',
            '--min-episode', '0.5', '--no-progress', '--planner-backend', 'transformers',
            '--planner-model', str(model), '--planner-device', 'cpu', '--rate', '2',
            '--planner-param', 'transformers.image_size=32', '--planner-param', 'max_new_tokens=6',
            '--planner-param', 'min_new_tokens=2']
    # The model looks at a camera the recording does not hold: refused, nothing written.
    assert main(['annotate', str(demonstration), str(tmp_path / 'none'), *args,
                 '--planner-cameras', 'wrist']) == 1
    assert "looks at camera(s) ['wrist'], which are not among the exported cameras " \
           "['front']" in capsys.readouterr().err
    assert not (tmp_path / 'none').exists()

    assert main(['annotate', str(demonstration), str(tmp_path / 'annotated'), *args,
                 '--repo-id', 'test/vlm']) == 0
    ds, rows, frames = _language(tmp_path / 'annotated', 'test/vlm')
    subtasks = [r for r in rows if r['style'] == 'subtask']
    assert subtasks and all(r['content'].strip() for r in subtasks), rows
    assert all(r['role'] == 'assistant' and r['camera'] is None for r in rows)
    # Every row sits on a frame, the first at the episode's start.
    stamps = {round(float(ds.hf_dataset[i]['timestamp']), 5) for i in range(len(ds))}
    assert {round(r['timestamp'], 5) for r in rows} <= stamps
    assert subtasks[0]['timestamp'] == 0.0 and frames[0]['subtask'] == subtasks[0]['content']



@pytest.mark.slow
def test_a_hierarchical_checkpoint_annotates_with_its_text_head(demonstration, tmp_path):
    """The two-head checkpoint's text head, trained on the task and on the interjection:
    its subtask and memory from the first frame on, and its answer to the interjection."""
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot')
    from lerobot_lang_nodes.cli.main import main
    from lerobot_lang_nodes.tiny_models import two_head

    model = two_head.build_two_head(tmp_path / 'two_head')
    assert main(['annotate', str(demonstration), str(tmp_path / 'annotated'),
                 '--repo-id', 'test/two_head', '--fps', str(FPS), '--episodes-by', 'whole',
                 '--min-episode', '0.5', '--no-progress', '--planner-backend', 'hierarchical',
                 '--planner-model', str(model), '--planner-device', 'cpu', '--rate', '2',
                 '--task', two_head.TASK,
                 # its tokens are bytes: room for the longest reply (the interjection's)
                 '--planner-param', 'max_new_tokens=96']) == 0
    _ds, rows, frames = _language(tmp_path / 'annotated', 'test/two_head')
    (frame, events), = _events(tmp_path / 'annotated').items()
    subtasks = _runs([f['subtask'] for f in frames])
    assert [v for _i, v in subtasks] == [two_head.SUBTASK, two_head.NEW_SUBTASK], subtasks
    changed = subtasks[1][0]
    assert 0 <= changed - frame <= 8, (frame, subtasks)  # the next look at 2 Hz
    at, then = (pytest.approx(i / FPS, abs=1e-4) for i in (frame, changed))
    # The text head's script: its subtask and memory, then the interjection's re-plan and
    # spoken reply (on the interjection's frame) and the new subtask and memory.
    assert sorted((r['style'], r['content'], r['timestamp']) for r in rows) == [
        ('memory', two_head.MEMORY, 0.0), ('memory', two_head.NEW_MEMORY, then),
        ('plan', two_head.NEW_PLAN, at),
        ('subtask', two_head.NEW_SUBTASK, then), ('subtask', two_head.SUBTASK, 0.0)]
    say = next(e for e in events if e['role'] == 'assistant')['tool_calls'][0]['function']
    assert say['arguments'] == {'text': two_head.SPEECH}


def test_prompts_that_quote_the_joints_get_the_recorded_joint_state_of_each_look(
        tmp_path, monkeypatch):
    """The export's annotation (a synthetic bag, no DDS) with config/prompts_joints.yaml: each
    subtask prompt quotes the arm's latest recorded joint state at that look (radians),
    rendered as the planner node renders the JointState it receives, and a planner that
    decides from it labels the frames where the arm moved."""
    from lerobot_lang_nodes.testing import require_ml
    require_ml('lerobot')
    import pyarrow.parquet as pq

    from lerobot_lang_nodes import paths
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    reach, grasp = [0.4, -1.2, 1.05, 0.3, -0.01, 0.52], [-0.35, -0.8, 0.9, 0.6, 0.25, 0.05]
    grasp_line = 'Joints: ' + prompts.render_joints(JOINTS, grasp)
    reach_line = 'Joints: ' + prompts.render_joints(JOINTS, reach)
    bag = synthetic.Session()
    t0 = synthetic.T0
    for i in range(2 * 30 + 1):  # the arm moves to the grasp pose at 1.1 s
        t = i / 30 - (0.002 if i else 0.0)
        bag.joints(t0 + t, np.array(reach if t < 1.1 else grasp))
    for k in range(21):
        bag.image(t0 + k * 0.1 - (0.003 if k else 0.0), 'front', 100)
    for c in range(4):
        bag.chunk(t0 + c * 0.5 + 0.01, np.zeros((15, len(JOINTS))), revision=1, period=1 / 30)
    bag.string(t0, '/task', TASK)

    class ByTheArm:
        """Decides from the joints line of its prompt alone."""

        observes = ()  # no ground truth, no camera

        def __init__(self) -> None:
            self.prompts: list[str] = []

        def generate(self, kind, messages, observation):
            if kind != 'subtask':
                return ''
            self.prompts.append(messages[0]['content'])
            return SUBTASKS[1] if self.prompts[-1].endswith(grasp_line) else SUBTASKS[0]

    planner = ByTheArm()
    monkeypatch.setattr(annotate, 'load_generator', lambda _opt: planner)
    result = export([bag.write(tmp_path / 'bags')], tmp_path / 'dataset', ExportOptions(
        fps=10, repo_id='test/joints', episodes_by='task', cameras=('front',),
        annotate=annotate.AnnotateOptions(rate_hz=5.0, planner=types.SimpleNamespace(
            prompts_file=str(paths.config_path('prompts_joints.yaml'))))))
    lines = [p.splitlines()[-1] for p in planner.prompts]
    assert set(lines) == {reach_line, grasp_line}
    switch = lines.index(grasp_line)  # reach until the arm moved, grasp from then on
    assert lines == [reach_line] * switch + [grasp_line] * (len(lines) - switch)
    rows = pq.read_table(result.root / 'data/chunk-000/file-000.parquet').to_pylist()
    subtasks = sorted((r['timestamp'], r['content']) for r in rows[0]['language_persistent']
                      if r['style'] == 'subtask')
    assert [c for _t, c in subtasks] == SUBTASKS[:2]
    assert 1.1 < subtasks[1][0] <= 1.3  # the first look (5 Hz) after the arm moved
