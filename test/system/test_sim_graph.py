"""The simulated system end to end: every node in its own process, MuJoCo, DDS, sim time.

One graph is started for the module (start-up costs ~10 s) and the tests use its persistent
scene as an operator would: a task, a question, resume, an interjection, a reset, killing the
policy. Each test arranges the state it needs (the mode, a task, the node it kills is
restarted), so any one runs alone (`pytest -k resume`) or in any order (checked reversed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray

from lerobot_lang_msgs.msg import RuntimeStatus
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import SimGraph, WaitTimeout, stop_popen, wait_until

pytestmark = pytest.mark.slow
CTRL_HZ = 30.0


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    g = SimGraph(tmp_path_factory.mktemp('sim_graph'))
    g.diagnostics = g.probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    try:
        g.wait_ready()
        yield g
    finally:
        g.close()


def _acting(sim) -> None:
    """Put the executor in action mode (a question or `lerobot-lang pause` leaves it paused)."""
    from std_srvs.srv import Trigger
    if sim.status.last is not None and sim.status.last.mode == RuntimeStatus.MODE_ACTION:
        return
    assert sim.probe.call(Trigger, 'resume', Trigger.Request()).success
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_ACTION, what='action mode',
                        since=n)


def _truth(sim) -> dict:
    from std_msgs.msg import String
    if not hasattr(sim, 'truth'):
        sim.truth = sim.probe.subscribe(String, 'sim/ground_truth', qos.LATCHED)
    n = len(sim.truth)
    return json.loads(sim.truth.wait_for(what='a ground truth', since=n).data)


def _subtasks(feedback: list[str]) -> list[str]:
    out: list[str] = []
    for s in feedback:
        if s and (not out or out[-1] != s):
            out.append(s)
    return out


def test_run_task_succeeds_with_subtask_feedback(sim):
    _acting(sim)
    n = len(sim.outcome)
    result, feedback = sim.run_task('put the red cube in the bowl', time_limit_s=60.0,
                                    timeout_s=240.0)
    assert result is not None and result.success, (
        f'{result and result.message}\n{sim.procs["planner"].log_text(3000)}')
    expected = ['reach the red cube', 'grasp the red cube', 'lift the red cube',
                'move the red cube over the bowl', 'release the red cube']
    seen = iter(_subtasks(feedback))
    assert all(step in seen for step in expected), _subtasks(feedback)  # in this order
    assert _subtasks(feedback)[0] == expected[0]
    assert list(result.subtasks)[-1] == 'release the red cube'
    # The scene persists: success does not reset it, the cube stays in the bowl.
    out = sim.outcome.wait_for(lambda m: m.success and 'red' in m.goal, what='red in bowl',
                               since=n)
    assert out.known_goal


def test_live_view_shows_the_annotated_scene(sim, tmp_path):
    import numpy as np
    from PIL import Image as PilImage

    from lerobot_lang_nodes.testing import CHROMIUM, chromium_screenshot
    from lerobot_lang_nodes.viewer.client import MjpegStreamReader
    import time

    from std_msgs.msg import String
    if not (sim.context.last and sim.context.last.task):  # run alone: give it a task to show
        pub = sim.probe.publisher(String, 'task', qos.LATCHED, wait_subscribers=1)
        pub.publish(String(data='put the red cube in the bowl'))
    deadline = time.monotonic() + 30.0
    with MjpegStreamReader('127.0.0.1', sim.viewer_port, timeout=10.0) as stream:
        while True:
            headers, frame = stream.read_frame()
            # The placeholder (seq 0) comes first; then wait for the task text in the header,
            # light on the translucent dark band over the views.
            if int(headers.get('x-frame-seq', '0')) > 0 and \
                    (frame[:40].min(axis=2) > 180).sum() > 100:
                break
            assert time.monotonic() < deadline, 'no annotated frame on /stream within 30 s'
    # Two 320x240 camera views side by side.
    assert frame.shape[1] == 640 and frame.shape[0] >= 240, frame.shape
    # The scene is not blank: the table, the arm and three cube colours give many colours.
    assert len(np.unique(frame.reshape(-1, 3) // 32, axis=0)) > 20
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get('LEROBOT_LANG_REQUIRE_CHROMIUM') == '1':
            pytest.fail(f'{CHROMIUM} is required (apt-get install chromium)')
        pytest.skip(f'{CHROMIUM} not installed (apt-get install chromium)')
    profile = tmp_path / 'profile'
    profile.mkdir()
    shot = tmp_path / 'live.png'
    chromium_screenshot(f'http://127.0.0.1:{sim.viewer_port}/', shot, profile, (900, 400))
    if os.environ.get('LEROBOT_LANG_KEEP_SCREENSHOT'):
        shot.replace(os.environ['LEROBOT_LANG_KEEP_SCREENSHOT'])
        shot = Path(os.environ['LEROBOT_LANG_KEEP_SCREENSHOT'])
    page = np.asarray(PilImage.open(shot).convert('RGB')).astype(int)
    # The page shows the stream image (not only the dark page background): a large
    # region of the warm table colour and the bright header text.
    table = ((page[:, :, 0] > 120) & (page[:, :, 0] > page[:, :, 2] + 30)).sum()
    assert table > 20000, table


def test_vqa_answers_from_the_scene_and_leaves_the_robot_paused(sim):
    _acting(sim)
    # Right after start-up the planner may have no camera frame yet (it says so): wait for one.
    reply = wait_until(lambda: (lambda r: None if 'no image received yet' in r.message else r)(
        sim.probe.call(AskVqa, 'vqa', AskVqa.Request(question='Is the red cube in the bowl?'),
                       timeout_s=30.0)), 30.0, 'a frame in the planner', sim.alive())
    # Paused now: the scene holds still, so the ground truth is the one the answer saw.
    in_bowl = _truth(sim)['objects']['red_cube']['in_bowl']
    assert reply.success and reply.answer == ('yes' if in_bowl else 'no'), reply
    reply = sim.probe.call(AskVqa, 'vqa', AskVqa.Request(question='what is in the gripper?',
                                                          camera='wrist'), timeout_s=30.0)
    assert reply.success and reply.answer == 'nothing'
    n = len(sim.status)
    paused = sim.status.wait_for(what='a status after the answer', since=n)
    assert paused.mode == RuntimeStatus.MODE_PAUSED and paused.queue_depth == 0
    bad = sim.probe.call(AskVqa, 'vqa', AskVqa.Request(question='hi', camera='nope'))
    assert not bad.success and 'front' in bad.message


def test_resume_resumes(sim):
    from std_srvs.srv import Trigger
    assert sim.probe.call(Trigger, 'pause', Trigger.Request()).success
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_PAUSED, what='paused', since=n)
    reply = sim.probe.call(Trigger, 'resume', Trigger.Request())
    assert reply.success
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.mode == RuntimeStatus.MODE_ACTION, what='action mode',
                        since=n)


def test_interjection_from_another_process_replans_and_drops_old_chunks(sim):
    _acting(sim)
    env = {**os.environ}
    # A task whose target the operator then changes mid-run.
    from std_msgs.msg import String
    pub = sim.probe.publisher(String, 'task', qos.LATCHED, wait_subscribers=1)
    n = len(sim.context)  # contexts of earlier tests (another task about the blue cube) aside
    pub.publish(String(data='put the green cube in the bowl'))
    sim.context.wait_for(lambda m: m.task == 'put the green cube in the bowl'
                         and m.subtask.endswith('green cube'), what='green plan', since=n)
    n, outcomes = len(sim.context), len(sim.outcome)
    said = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'interject',
                           'use the blue cube instead'], env=env, capture_output=True,
                          text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    changed = sim.context.wait_for(lambda m: 'blue' in m.subtask, timeout_s=30.0,
                                   what='a subtask about the blue cube', since=n)
    assert changed.plan == 'put the blue cube in the bowl'
    # The executor hears of the new revision, then only dispatches that revision or newer.
    sim.status.wait_for(lambda m: m.last_chunk_revision >= changed.revision, timeout_s=30.0,
                        what='a dispatched action of the new revision')
    revisions = [d['revision'] for d in sim.dispatches()]
    assert revisions == sorted(revisions), 'an older revision was dispatched after a newer one'
    assert sim.status.last.context_revision >= changed.revision
    first_new = revisions.index(next(r for r in revisions if r >= changed.revision))
    assert all(r >= changed.revision for r in revisions[first_new:])
    # The policy's inference log says where the reaction went, on the dispatch log's clock:
    # the first chunk for the new context was inferred after the policy heard of it and
    # dispatched after it was inferred; no chunk of the old operator context was published
    # once the policy knew of the change (one computed meanwhile is thrown away).
    # Only this policy process's records: the log outlives a policy killed and restarted, and
    # a restarted policy counts its inferences from 0 again.
    born = sim.procs['policy'].started
    inferences = [r for r in sim.inferences() if r['start'] >= born]
    first = next(r for r in inferences if r['outcome'] == 'published'
                 and r['revision'] >= changed.revision)
    assert first['context_wall'] <= first['start'] <= first['end'], first
    # Its latency is the one /diagnostics reports: each policy status names how many
    # inferences ran and the last one's latency, which is that inference's in the log (the
    # policy counts every outcome but 'failed').
    def timed() -> list[dict]:
        return [r for r in sim.inferences() if r['outcome'] != 'failed' and r['start'] >= born]
    upto = timed().index(first) + 1

    def reported_up_to_first() -> list[tuple[int, float]] | None:
        got = policy_latencies_ms(sim)
        return got if any(n >= upto for n, _ in got) else None
    reported = wait_until(reported_up_to_first, 30.0, 'a policy status counting that inference',
                          sim.alive())
    records = timed()
    assert [records[n - 1]['latency_s'] * 1e3 for n, _ in reported] == \
        pytest.approx([ms for _, ms in reported], rel=1e-5, abs=1e-3), reported
    dispatched = [d for d in sim.dispatches() if d['sequence'] == first['sequence']]
    assert dispatched and dispatched[0]['wall'] >= first['end'], (first, dispatched[:1])
    late = [r for r in inferences if r['outcome'] == 'published'
            and r['flush_revision'] < first['flush_revision'] and r['end'] > first['context_wall']]
    assert not late, late
    outcome = sim.outcome.wait_for(lambda m: m.success and 'blue' in m.goal, timeout_s=120.0,
                                   since=outcomes,
                                   what='the blue cube in the bowl')
    assert outcome.context_revision >= changed.revision


def policy_latencies_ms(sim) -> list[tuple[int, float]]:
    """(inferences, latency_last_ms) of every status of the running policy process on
    /diagnostics so far (a restarted policy counts from 0 again: what came before is left out)."""
    out: list[tuple[int, float]] = []
    for arr in sim.diagnostics.snapshot():
        for status in arr.status:
            if status.name.startswith('policy:'):
                v = {kv.key: kv.value for kv in status.values}
                if out and int(v['inferences']) < out[-1][0]:
                    out = []
                if int(v['inferences']) > 0:
                    out.append((int(v['inferences']), float(v['latency_last_ms'])))
    return out


def test_reset_rerolls_the_scene(sim):
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    truth = sim.probe.subscribe(String, 'sim/ground_truth', qos.LATCHED)
    before = json.loads(truth.wait_for(what='ground truth').data)
    reply = sim.probe.call(Trigger, 'sim/reset', Trigger.Request(), timeout_s=30.0)
    assert reply.success, reply.message
    after = json.loads(truth.wait_for(
        lambda m: json.loads(m.data)['seed'] != before['seed'], what='a re-rolled layout').data)
    # Each reset draws the next seed (sim_bridge seed + 1000 x resets) and says which.
    assert after['seed'] == before['seed'] + 1000 and f"seed {after['seed']}" in \
        reply.message, (reply.message, before['seed'], after['seed'])
    assert after['objects']['red_cube']['position'] != before['objects']['red_cube']['position']
    assert not any(o['in_bowl'] for o in after['objects'].values())


def test_direct_subtask_mode_bypasses_generation(sim):
    _acting(sim)
    result, feedback = sim.run_task_direct('pick up the green cube')
    assert result is not None and result.success, result and result.message
    assert set(s for s in feedback if s) == {'pick up the green cube'}
    ctx = sim.context.last
    assert ctx.subtask == ctx.task == 'pick up the green cube' and ctx.source == 'operator'


def test_malformed_and_foreign_chunks_are_rejected_with_a_reason(sim):
    from lerobot_lang_msgs.msg import ActionChunk
    pub = sim.probe.publisher(ActionChunk, 'action_chunk', qos.COMMAND, wait_subscribers=1)
    before = sim.status.last.rejected_invalid
    joints = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll',
              'gripper']
    rev = sim.context.last.revision
    pub.publish(ActionChunk(context_revision=rev, action_names=joints, horizon=2,
                            action_dim=6, values=[0.0] * 5, sequence=10**6))  # 5 != 2 * 6
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.rejected_invalid == before + 1,
                        what='one malformed rejection', since=n)
    pub.publish(ActionChunk(context_revision=rev, action_names=[f'j{i}' for i in range(6)],
                            horizon=1, action_dim=6, values=[0.0] * 6, sequence=10**6 + 1))
    got = sim.status.wait_for(lambda m: m.rejected_invalid == before + 2,
                              what='rejection of foreign joint names')
    assert 'name' in got.last_reject_reason, got.last_reject_reason
    assert all(p.alive for p in sim.procs.values())


def test_operator_cli_ask_and_status(sim):
    ask = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'ask',
                          'how many cubes do you see?'], capture_output=True, text=True,
                         timeout=90)
    assert ask.returncode == 0, ask.stderr
    assert ask.stdout.strip() == '3'
    status = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'status'],
                            capture_output=True, text=True, timeout=90)
    assert status.returncode == 0, status.stderr
    assert 'mode:     paused' in status.stdout and 'task:' in status.stdout
    resume = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'resume'],
                            capture_output=True, text=True, timeout=90)
    assert resume.returncode == 0 and 'resumed' in resume.stdout
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.mode == 'action',
                        what='action mode after `lerobot-lang resume`', since=n)
    pause = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'pause'],
                           capture_output=True, text=True, timeout=90)
    assert pause.returncode == 0 and 'paused' in pause.stdout
    n = len(sim.status)
    sim.status.wait_for(lambda m: m.mode == 'paused' and m.queue_depth == 0,
                        what='paused after `lerobot-lang pause`', since=n)
    task = subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'task',
                           'pick up the blue cube'], capture_output=True, text=True, timeout=90)
    assert task.returncode == 0, task.stderr
    sim.context.wait_for(lambda m: m.task == 'pick up the blue cube', what='the CLI task')
    subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'resume'],
                   capture_output=True, text=True, timeout=90, check=True)


def _cli(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', *args],
                          capture_output=True, text=True, timeout=timeout)


def test_operator_cli_run_follows_a_task_to_its_end(sim):
    _acting(sim)
    short = _cli('run', 'put the blue cube in the bowl', '--time-limit', '1')
    assert short.returncode == 1, short.stdout + short.stderr
    assert 'running: put the blue cube in the bowl' in short.stdout
    assert 'failed: time limit 1.0 s reached' in short.stdout
    done = _cli('run', 'put the blue cube in the bowl', '--time-limit', '90', timeout=240.0)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith('subtask: ') for line in lines), done.stdout
    assert any(line.startswith('succeeded: ') for line in lines), done.stdout
    assert 'release the blue cube' in done.stdout  # the last step, in the subtask list


def test_ctrl_c_on_operator_cli_run_cancels_the_goal(sim, tmp_path):
    log = tmp_path / 'run.log'
    with log.open('w') as out:
        proc = subprocess.Popen([sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'run',
                                 'put the green cube in the bowl'], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: 'running: ' in log.read_text(), 60.0, 'the goal to be accepted')
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, log.read_text()
    finally:
        stop_popen(proc, 10.0)
    assert 'cancelled' in log.read_text() and 'Traceback' not in log.read_text()
    wait_until(lambda: "RunTask 'put the green cube in the bowl': canceled"
               in sim.procs['planner'].log_text(), 10.0, 'the planner to end the goal')


def test_killing_the_policy_makes_the_arm_hold(sim):
    from std_msgs.msg import String
    _acting(sim)
    pub = sim.probe.publisher(String, 'task', qos.LATCHED, wait_subscribers=1)
    pub.publish(String(data='put the red cube in the bowl'))
    n = len(sim.status)
    try:
        moving = sim.status.wait_for(lambda m: m.mode == 'action' and m.queue_depth > 0
                                     and m.last_chunk_sequence > 0, timeout_s=30.0,
                                     what='the arm executing chunks', since=n)
    except WaitTimeout:
        raise AssertionError(sim.procs['policy'].log_text(3000) + '\n=====\n'
                             + sim.procs['sim_bridge'].log_text(3000) + '\n=====\n'
                             + sim.procs['planner'].log_text(3000)) from None
    sim.procs['policy'].kill()
    try:
        _holds_without_policy(sim, moving)
    finally:  # the other tests need a policy: start a fresh one, as an operator would
        n = len(sim.diagnostics)
        sim.start('policy')
        sim.diagnostics.wait_for(lambda a: any(st.name.startswith('policy:') for st in a.status),
                                 timeout_s=60.0, since=n, what='the restarted policy')


def _holds_without_policy(sim, moving) -> None:
    n = len(sim.status)
    empty = sim.status.wait_for(lambda m: m.queue_depth == 0, timeout_s=10.0,
                                what='queue ran out', since=n)
    later = sim.status.wait_for(what='later statuses',
                                since=sim.status.snapshot().index(empty) + 3)
    assert later.dispatched == empty.dispatched, 'an action was dispatched with no policy'
    assert later.starved_ticks > empty.starved_ticks
    # Hold within two control periods of the last dispatched action: every control tick
    # after it (but at most two) counts as starved, i.e. the arm got no new target.
    def stamp(m) -> float:
        return m.header.stamp.sec + m.header.stamp.nanosec * 1e-9

    last_t = sim.dispatches()[-1]['t']
    before = [m for m in sim.status.snapshot() if stamp(m) <= last_t]
    assert before, 'no status before the last dispatch'
    base = before[-1]
    t_later = stamp(later)
    ticks_after_last = round((t_later - last_t) * CTRL_HZ)
    starved_after_last = later.starved_ticks - base.starved_ticks
    assert starved_after_last >= ticks_after_last - 2, (starved_after_last, ticks_after_last)
    assert later.dispatched - base.dispatched <= round((last_t - stamp(base)) * CTRL_HZ) + 1
    assert moving.dispatched <= empty.dispatched
