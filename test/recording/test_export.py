"""Export of a synthetic session (a real bag written by the recorder's writer) to a LeRobot
v3.0 dataset: layout and schema as LeRobot writes them, the resampling rule, videos, language
rows at the right frames, LeRobot's own loader; and clear errors that leave nothing behind."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml('lerobot')

from lerobot_lang_nodes.recording.dataset import ExportError, ExportOptions, export  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import T0, standard_session  # noqa: E402

FPS = 15


def _load(root: Path, repo_id: str):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    return LeRobotDataset(repo_id, root=root, video_backend='pyav')


def _rows(root: Path) -> list[dict]:
    return pq.read_table(root / 'data/chunk-000/file-000.parquet').to_pylist()


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('export')
    bag = standard_session(duration_s=4.0).write(tmp / 'bags', storage='mcap')
    result = export([bag], tmp / 'dataset',
                    ExportOptions(fps=FPS, repo_id='test/synthetic', episodes_by='whole'))
    result.bag = bag
    return result


def test_layout_and_info_are_lerobot_v3_with_language_features(exported):
    from lerobot.datasets.language import SAY_TOOL_SCHEMA, language_feature_info
    root = exported.root
    for rel in ('meta/info.json', 'meta/stats.json', 'meta/tasks.parquet',
                'meta/episodes/chunk-000/file-000.parquet', 'data/chunk-000/file-000.parquet',
                'videos/observation.images.front/chunk-000/file-000.mp4',
                'videos/observation.images.wrist/chunk-000/file-000.mp4'):
        assert (root / rel).is_file(), rel
    info = json.loads((root / 'meta/info.json').read_text())
    assert info['codebase_version'] == 'v3.0' and info['fps'] == FPS
    assert info['total_frames'] == exported.frames and info['total_episodes'] == 1
    joints = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll',
              'gripper']
    for key in ('observation.state', 'action'):
        assert info['features'][key] == {'dtype': 'float32', 'shape': [6], 'names': joints}
    for cam in ('front', 'wrist'):
        ft = info['features'][f'observation.images.{cam}']
        assert ft['dtype'] == 'video' and ft['shape'] == [48, 64, 3]
    for key, ft in language_feature_info().items():
        assert info['features'][key] == {**ft, 'shape': list(ft['shape'])}
    assert SAY_TOOL_SCHEMA in info['tools']
    assert '{chunk_index' in info['data_path'] and '{video_key}' in info['video_path']
    stats = json.loads((root / 'meta/stats.json').read_text())
    assert 'observation.state' in stats and 'language_events' not in stats


def test_frames_follow_the_resampling_rule(exported):
    rows = _rows(exported.root)
    # Ticks every 1/15 s from the first sample of every stream (0 s) to the last time every
    # stream has one (the last image, at 3.997 s).
    assert len(rows) == exported.frames == math.floor(3.997 * FPS) + 1
    ts = np.array([r['timestamp'] for r in rows])
    assert np.all(np.diff(ts) > 0)
    assert np.allclose(ts, np.arange(len(rows)) / FPS, atol=1e-6)
    assert [r['frame_index'] for r in rows] == list(range(len(rows)))
    state = np.array([r['observation.state'] for r in rows])
    action = np.array([r['action'] for r in rows])
    # Joint 0 is the time of its sample (2 ms before each 1/30 s): the last one at or
    # before each tick.
    expected = np.floor((ts + 0.002) * 30) / 30
    assert np.allclose(state[:, 0], expected, atol=1e-5)
    # The action: chunk c (sent every 0.5 s) running step k encodes c + k / 100.
    c = np.clip(np.floor((ts - 0.01) * 2 + 1e-9), 0, None)
    start = c * 0.5 + 0.01
    k = np.clip(np.floor((ts - start) * 30 + 1e-6), 0, 14)
    held = ts < 0.01  # before the first chunk: the robot holds its state
    assert np.allclose(action[~held, 1], (c + k / 100)[~held], atol=1e-5)
    assert np.allclose(action[held], state[held])


def test_videos_decode_with_one_frame_per_row_showing_the_sampled_image(exported):
    import av
    n = exported.frames
    for cam in ('front', 'wrist'):
        path = exported.root / f'videos/observation.images.{cam}/chunk-000/file-000.mp4'
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format='rgb24') for f in container.decode(video=0)]
        assert len(frames) == n
        ts = np.arange(n) / FPS
        expected = (np.floor((ts + 0.003) * 10) * 5) % 250  # the last image at or before
        got = np.array([f.mean() for f in frames])
        assert np.all(np.abs(got - expected) < 4), np.c_[got, expected][:12]


def test_language_rows_sit_on_the_right_frames(exported):
    rows = _rows(exported.root)
    persistent = rows[0]['language_persistent']
    assert all(r['language_persistent'] == persistent for r in rows)  # on every frame
    got = {(p['style'], p['content'], round(p['timestamp'], 4)) for p in persistent}
    inter_frame = math.ceil(1.52 * FPS)  # first frame at or after the interjection
    assert got == {('plan', 'put the red cube in the bowl', 0.0),
                   ('subtask', 'reach the red cube', 0.0),
                   ('subtask', 'grasp the red cube', 1.0),
                   ('memory', 'reached the red cube', 1.0),
                   ('plan', 'put the blue cube in the bowl', round(inter_frame / FPS, 4))}
    with_events = {r['frame_index']: r['language_events'] for r in rows if r['language_events']}
    vqa_frame = math.ceil(2.5 * FPS)
    assert sorted(with_events) == [inter_frame, vqa_frame]
    events = with_events[inter_frame]
    assert {(e['role'], e['style'], e['content']) for e in events} == {
        ('user', 'interjection', 'use the blue cube instead'), ('assistant', None, None)}
    speech = next(e for e in events if e['style'] is None)
    assert speech['tool_calls'][0]['function']['name'] == 'say'
    assert all(e['camera'] is None for e in events)
    vqa = with_events[vqa_frame]
    assert {(e['role'], e['content'], e['camera']) for e in vqa} == {
        ('user', 'what is in the gripper?', 'observation.images.wrist'),
        ('assistant', 'nothing', 'observation.images.wrist')}


def test_lerobot_loads_the_dataset_with_its_language_columns(exported):
    ds = _load(exported.root, 'test/synthetic')
    assert len(ds) == exported.frames and ds.meta.total_episodes == 1
    item = ds[math.ceil(1.52 * FPS)]
    assert tuple(item['observation.images.front'].shape) == (3, 48, 64)
    assert item['task'] == 'put the red cube in the bowl'
    styles = {e['style'] for e in item['language_events']}
    assert styles == {'interjection', None}
    assert ds.meta.tools[0]['function']['name'] == 'say'


def test_episodes_by_outcome_in_lerobot_units(tmp_path):
    session = standard_session(duration_s=4.0)
    session.outcome(T0 + 2.01, 'put the red cube in the bowl', True)
    session.context(T0 + 2.99, 'put the blue cube in the bowl', 'reach the blue cube', '',
                    'put the blue cube in the bowl', 2)
    bag = session.write(tmp_path / 'bags', storage='sqlite3')
    result = export([bag], tmp_path / 'ds',
                    ExportOptions(fps=FPS, repo_id='test/outcome', units='lerobot',
                                  episodes_by='outcome', min_episode_s=0.5))
    rows = _rows(result.root)
    lengths = np.bincount([r['episode_index'] for r in rows])
    # Success at 2.01 s ends episode 0 (ticks 0 .. 2.0); the idle second until the next task
    # at 2.99 s is left out; episode 1 runs from the tick at 3.0 s to the last, 3.933 s.
    assert list(lengths) == [31, 15]
    info = json.loads((result.root / 'meta/info.json').read_text())
    assert info['features']['observation.state']['names'][0] == 'shoulder_pan.pos'
    state = np.array([r['observation.state'] for r in rows])
    step = np.diff(state[:31, 0])  # joint 0 moves 1 rad/s: degrees per frame
    assert np.allclose(step[np.abs(step) > 0].mean(), math.degrees(1 / FPS), rtol=0.1)
    ds = _load(result.root, 'test/outcome')
    tasks = {ds[i]['task'] for i in range(len(ds))}
    assert tasks == {'put the red cube in the bowl', 'put the blue cube in the bowl'}


def test_a_new_episode_starts_with_the_planner_context_of_its_task(tmp_path):
    # The operator's /task comes a planner step before the planner's context for it (which
    # clears the old subtask and memory). An episode cut at the /task message would open on
    # a frame with the new task and the old task's language; cut at the context it does not.
    session = standard_session(duration_s=4.0)
    session.outcome(T0 + 2.01, 'put the red cube in the bowl', True)
    blue = 'put the blue cube in the bowl'
    session.string(T0 + 2.90, '/task', blue)
    session.context(T0 + 2.99, blue, '', '', '', 2)
    session.context(T0 + 3.06, blue, 'reach the blue cube', '', blue, 3)
    bag = session.write(tmp_path / 'bags', storage='mcap')
    result = export([bag], tmp_path / 'ds',
                    ExportOptions(fps=FPS, repo_id='test/cut', episodes_by='outcome',
                                  min_episode_s=0.5))
    rows = _rows(result.root)
    second = [r for r in rows if r['episode_index'] == 1]
    assert second and all(r['task_index'] == second[0]['task_index'] for r in second)
    persistent = second[0]['language_persistent']
    assert [(r['style'], r['content']) for r in persistent if r['style'] == 'subtask'] == [
        ('subtask', 'reach the blue cube')]
    assert not [r for r in persistent if 'red' in (r['content'] or '')]
    first = min(float(r['timestamp']) for r in persistent)
    assert first > float(second[0]['timestamp'])  # nothing active at the first frame
    ds = _load(result.root, 'test/cut')
    assert ds[len(rows) - len(second)]['task'] == blue


def test_marks_cut_at_their_stamp_not_at_their_late_arrival(tmp_path, monkeypatch):
    # An episode mark heard 0.4 s after it was sent (a loaded recorder) still cuts where it was
    # sent; a stamp on another clock (1000 s off) is not trusted: that mark cuts at arrival.
    import synthetic
    monkeypatch.setitem(synthetic.TOPICS, '/episode_event', 'std_msgs/msg/String')
    session = standard_session(duration_s=4.0)
    late = 0.4
    for sent, event in ((0.0, {'event': 'episode', 'index': 0, 'task': 'a'}),
                        (1.0, {'event': 'reset'}),
                        (2.0, {'event': 'episode', 'index': 1, 'task': 'b'}),
                        (3.0, {'event': 'stop', 'stamp': T0 + 3.0 - 1000.0})):
        event.setdefault('stamp', T0 + sent)
        session.string(T0 + sent + late, '/episode_event', json.dumps(event))
    bag = session.write(tmp_path / 'bags', storage='mcap')
    result = export([bag], tmp_path / 'ds',
                    ExportOptions(fps=10, repo_id='test/stamped', episodes_by='marks',
                                  min_episode_s=0.2))
    rows = _rows(result.root)
    lengths = np.bincount([r['episode_index'] for r in rows])
    # Episode 0 from 0.0 to its stamped reset at 1.0 s: 10 frames at 10 fps; episode 1 from
    # its stamp at 2.0 s to the stop heard at 3.4 s (its stamp on another clock): 14. At
    # arrival both would be 10 frames, 0.4 s late.
    assert list(lengths) == [10, 14], lengths


def _no_leftovers(parent: Path) -> None:
    assert not [p for p in parent.iterdir() if '.partial-' in p.name]


def test_errors_are_clear_and_leave_nothing_behind(tmp_path):
    session = standard_session(duration_s=2.0)
    session.items = [i for i in session.items if i[1] != '/action_chunk']
    bag = session.write(tmp_path / 'bags')
    out = tmp_path / 'out'
    with pytest.raises(ExportError, match='lack .*action_chunk'):
        export([bag], out, ExportOptions(fps=FPS))
    assert not out.exists()
    _no_leftovers(tmp_path)

    out.mkdir()
    (out / 'something').write_text('x')
    with pytest.raises(ExportError, match='not empty'):
        export([bag], out, ExportOptions(fps=FPS))
    assert [p.name for p in out.iterdir()] == ['something']

    mcap = next(bag.glob('*.mcap'))
    mcap.write_bytes(mcap.read_bytes()[:200])
    with pytest.raises(ExportError, match='corrupt or truncated'):
        export([bag], tmp_path / 'out2', ExportOptions(fps=FPS))
    assert not (tmp_path / 'out2').exists()
    _no_leftovers(tmp_path)


def test_the_command_line_exports_and_refuses_a_non_empty_folder(exported, tmp_path, capsys):
    from lerobot_lang_nodes.cli import export as cli
    out = tmp_path / 'cli'
    args = [str(exported.bag), str(out), '--fps', '5', '--episodes-by', 'whole',
            '--repo-id', 'test/cli', '--no-progress']
    assert cli.main(args) == 0
    assert 'wrote 20 frames in 1 episode(s)' in capsys.readouterr().out  # 3.997 s at 5 fps
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert 'nothing written' in err and 'not empty' in err


def test_export_leaves_the_calling_threads_scheduling_as_it_was(tmp_path):
    # SVT-AV1 as root turns the encoding thread SCHED_FIFO 99; nodes started afterwards from
    # that thread would inherit it and starve the machine.
    from lerobot_lang_nodes.recording.scheduling import current
    before = current()
    bag = standard_session(duration_s=1.5).write(tmp_path / 'bags', storage='mcap')
    export([bag], tmp_path / 'ds', ExportOptions(fps=FPS, episodes_by='whole'))
    assert current() == before


def test_scheduling_kept_restores_a_policy_changed_inside():
    from lerobot_lang_nodes.recording.scheduling import current, scheduling_kept
    before = current()
    with scheduling_kept():
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # what an encoder might do
        assert current()[0] == os.SCHED_BATCH
    assert current() == before
