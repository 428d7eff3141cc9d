"""Faults injected into the running sim graph (every node its own process, DDS, MuJoCo).

Policy and planner killed (SIGKILL) and restarted, /vqa flooded from several processes,
interjections at 100 Hz, oversized and control-character text on every input. Each test
passes only if the protection holds: the arm holds or keeps working, nothing of an older
revision runs, the revision never goes backwards, nothing deadlocks or grows without bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String

from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import SimGraph, WaitTimeout, wait_until

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
TASK = 'put the red cube in the bowl'


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('fault_graph')
    g = SimGraph(tmp, params={'planner': {'state_file': str(tmp / 'planner_state.json')}},
                 probe_name='fault_probe')
    g.diagnostics = g.probe.subscribe(DiagnosticArray, 'diagnostics', qos.STATUS)
    g.task_pub = g.probe.publisher(String, 'task', qos.LATCHED)
    try:
        g.wait_ready()
        yield g
    finally:
        g.close()


def planner_values(sim) -> dict[str, str]:
    for arr in reversed(sim.diagnostics.snapshot()):
        for s in arr.status:
            if s.name == 'planner: text generation':
                return {kv.key: kv.value for kv in s.values}
    return {}


def working(sim, since: int | None = None, what: str = 'the arm executing chunks'):
    try:
        return sim.status.wait_for(lambda m: m.mode == 'action' and m.dispatched > 0
                                   and m.last_chunk_sequence > 0, timeout_s=60.0, what=what,
                                   since=len(sim.status) if since is None else since)
    except WaitTimeout:
        raise AssertionError(sim.logs()) from None


def resume(sim) -> None:
    from std_srvs.srv import Trigger
    assert sim.probe.call(Trigger, 'resume', Trigger.Request(), timeout_s=20.0).success


def start_task(sim, task: str = TASK) -> None:
    wait_until(lambda: sim.task_pub.get_subscription_count() >= 2, 30.0,
               'planner and sim_bridge on /task', sim.alive())
    sim.task_pub.publish(String(data=task))
    resume(sim)
    working(sim)


def test_policy_killed_mid_chunk_then_restarted(sim, fault_report):
    row = fault_report.row('policy killed mid-chunk, restarted',
                           note='held after the queue ran out; resumed from the latched '
                                'context; unsafe: actions dispatched with no policy or of a '
                                'revision older than the flush')
    start_task(sim)
    with row.injection():
        sim.procs['policy'].kill()
        n = len(sim.status)
        empty = sim.status.wait_for(lambda m: m.queue_depth == 0, timeout_s=10.0,
                                    what='the queue to run out', since=n)
        i = sim.status.snapshot().index(empty)
        later = sim.status.wait_for(what='three more statuses', since=i + 3)
        row.record(unsafe=later.dispatched - empty.dispatched)
        assert later.dispatched == empty.dispatched, 'an action was dispatched with no policy'
        assert later.starved_ticks > empty.starved_ticks  # holding: ticks without a target
        ctx = sim.context.last
        restart_mark = len(sim.dispatches())
        sim.start('policy')
        back = sim.status.wait_for(lambda m: m.dispatched > later.dispatched + 10,
                                   timeout_s=90.0, what='dispatching again after the restart',
                                   since=len(sim.status))
        # The restarted policy works from the latched context: its chunks carry that revision
        # or a newer one, and nothing older than the flush revision is dispatched.
        after = sim.dispatches()[restart_mark:]
        flush = int(ctx.flush_revision) or int(ctx.revision)
        older = [d for d in after if d['revision'] < flush]
        row.record(unsafe=len(older))
        assert after, 'no dispatch logged after the restart'
        assert not older, older[:3]
        assert back.last_chunk_revision >= ctx.revision
        assert ctx.subtask and back.active_instruction, back


def test_planner_killed_and_restarted_resumes_task_and_revision(sim, fault_report):
    row = fault_report.row('planner killed, restarted (with and without state file)',
                           note='revision monotonic; task resumed')
    if sim.status.last.mode != 'action' or sim.context.last.task != TASK:
        start_task(sim)
    with row.injection():
        before = sim.context.last
        sim.procs['planner'].kill()
        dead = sim.status.last
        # The arm keeps working on the last subtask while the planner is down.
        sim.status.wait_for(lambda m: m.dispatched >= dead.dispatched + 30, timeout_s=30.0,
                            what='dispatches continuing without the planner',
                            since=len(sim.status))
        n_ctx = len(sim.context)
        sim.start('planner')
        resumed = sim.context.wait_for(timeout_s=60.0,
                                       what='a context from the restarted planner', since=n_ctx)
        assert resumed.task == before.task
        assert resumed.revision >= before.revision  # never backwards
        assert resumed.flush_revision == before.flush_revision  # no flush: chunks stay fresh
        assert 'resumed from' in sim.procs['planner'].log_text()
        working(sim, what='the arm working after the planner restart')

    # Without its state file the restarted planner still never goes backwards: it continues
    # past the executor's revision (so every chunk from before the restart is stale).
    with row.injection():
        exec_rev = sim.status.last.context_revision
        sim.procs['planner'].kill()
        Path(sim.tmp / 'planner_state.json').unlink()
        n_ctx = len(sim.context)
        sim.start('planner')
        past = sim.context.wait_for(lambda m: m.revision > exec_rev, timeout_s=60.0,
                                    what='a context past the executor revision', since=n_ctx)
        assert past.flush_revision > exec_rev  # everything from before the restart is stale
        revisions = [m.context_revision for m in sim.status.snapshot()]
        assert all(b >= a for a, b in zip(revisions, revisions[1:])), 'revision went back'
        # The still-latched /task sample gives the fresh planner its task again.
        sim.context.wait_for(lambda m: m.task == TASK, timeout_s=30.0, what='the task again',
                             since=n_ctx)
        working(sim, what='the arm working after a restart without state')


def run_flood(script: str, *args: str, timeout_s: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / script), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_vqa_flood_is_answered_or_refused_busy_and_task_still_served(sim, fault_report):
    row = fault_report.row('50 concurrent /vqa from 5 processes')
    bound_s = 90.0
    floods = [run_flood('vqa_flood.py', '10', str(bound_s), timeout_s=bound_s)
              for _ in range(5)]
    row.injections += 50
    try:
        # /task is still served during the flood.
        n_ctx = len(sim.context)
        sim.task_pub.publish(String(data='put the blue cube in the bowl'))
        sim.context.wait_for(lambda m: m.task == 'put the blue cube in the bowl',
                             timeout_s=30.0, what='a task taken during the flood', since=n_ctx)
        outs = [f.communicate(timeout=bound_s + 30.0)[0] for f in floods]
    finally:
        for f in floods:
            if f.poll() is None:
                f.kill()
    answers = [json.loads(line) for out in outs for line in out.splitlines()
               if line.startswith('{')]
    replies = [a for a in answers if a.get('latency_s') is not None]  # got a response
    answered = sum(bool(a['success']) for a in replies)
    busy = sum(not a['success'] and 'busy' in a['message'] for a in replies)
    slowest = max((a['latency_s'] for a in replies), default=None)
    # Survived: answered or refused busy; lost: a call that got no response at all.
    row.survived += answered + busy
    row.record(lost=50 - len(replies))
    row.note = (f'{answered} answered, {busy} refused busy, {50 - len(replies)} without a '
                f"response; slowest {'-' if slowest is None else f'{slowest:.1f}'} s")
    assert len(answers) == 50, outs
    unanswered = [a for a in answers if not a['success'] and 'busy' not in a['message']]
    assert not unanswered, unanswered[:3]
    assert answered > 0
    assert slowest < bound_s
    assert sim.procs['planner'].alive
    sim.status.wait_for(lambda m: m.mode == 'paused', timeout_s=10.0,
                        what='the robot paused by the questions', since=len(sim.status) - 1)
    wait_until(lambda: int(planner_values(sim).get('vqa_busy', '0')) >= busy, 20.0,
               'the busy refusals counted on /diagnostics', [sim.procs['planner']])
    resume(sim)


def soon(predicate, timeout_s: float, what: str, processes) -> bool:
    """wait_until as a measurement: False instead of an exception when it did not come."""
    try:
        wait_until(predicate, timeout_s, what, processes)
    except WaitTimeout:
        return False
    return True


def rss_kib(pid: int) -> int:
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
    raise AssertionError('no VmRSS')


def test_interjection_flood_is_bounded_and_the_newest_wins(sim, fault_report):
    row = fault_report.row('interjections at 100 Hz for 10 s')
    planner = sim.procs['planner']
    rss_before = rss_kib(planner.pid)
    flood = run_flood('interjection_flood.py', '100', '10', timeout_s=60.0)
    peak_jobs = 0
    seen = len(sim.diagnostics)
    deadline = time.monotonic() + 60.0
    while flood.poll() is None and time.monotonic() < deadline:
        arr = sim.diagnostics.wait_for(timeout_s=5.0, what='planner diagnostics', since=seen)
        seen = sim.diagnostics.snapshot().index(arr) + 1
        peak_jobs = max(peak_jobs, int(planner_values(sim).get('queued_jobs', '0')))
    out, _ = flood.communicate(timeout=30.0)
    sent = int(out.strip().splitlines()[-1])
    row.injections += sent
    last = f'use the blue cube instead #{sent - 1}'
    newest = soon(lambda: f'interjection {last!r}' in planner.log_text(), 60.0,
                  'the planner to answer the newest interjection', [planner])
    answered = planner.log_text().count("interjection 'use the blue cube instead #")
    coalesced = int(planner_values(sim).get('interjections_coalesced', '0'))
    growth_mib = (rss_kib(planner.pid) - rss_before) / 1024
    # Survived: answered, or replaced by a newer one before the planner got to it. What is
    # neither was dropped by the subscription's bounded DDS queue (depth 10, newest kept):
    # also newest-wins, and still in any recording of the topic; counted as lost.
    handled = min(sent, answered + coalesced)
    row.survived += handled
    row.record(lost=sent - handled)
    row.note = (f'{answered} answered, {coalesced} replaced by a newer one, {sent - handled} '
                f'dropped by the bounded DDS queue (newest kept); newest answered: '
                f"{'yes' if newest else 'NO'}; peak queue {peak_jobs}, RSS "
                f'+{growth_mib:.0f} MiB')
    assert sent == 1000
    assert newest, 'the planner never answered the newest interjection'
    assert peak_jobs <= 5, f'the planner queued {peak_jobs} jobs'
    assert answered + coalesced >= sent // 2, (answered, coalesced)
    assert growth_mib < 64, f'planner memory grew by {growth_mib:.0f} MiB'


def test_oversized_and_control_character_text_is_refused_everywhere(sim, fault_report):
    row = fault_report.row('oversized / control-character text (task, interjection, vqa, '
                           'RunTask)', note='refused with the reason, counted on /diagnostics')
    before = sim.context.last
    refused0 = int(planner_values(sim).get('refused_inputs', '0'))
    refusals: dict[str, bool] = {}
    row.injections += 1
    sim.task_pub.publish(String(data='put the red cube in the bowl ' + 'x' * 5000))
    inter = sim.probe.publisher(String, 'interjection', qos.COMMAND, wait_subscribers=1)
    row.injections += 1
    inter.publish(String(data='use the \x1b[31mred\x1b[0m cube'))
    row.injections += 1
    response = sim.probe.call(AskVqa, 'vqa', AskVqa.Request(question='q' * 3000),
                              timeout_s=20.0)
    refusals['vqa, 3000 characters'] = not response.success and \
        'limit is 2000' in response.message
    # (NUL cannot even travel: ROS strings end at it.)
    row.injections += 1
    response = sim.probe.call(AskVqa, 'vqa', AskVqa.Request(question='what\x1b[2J now?'),
                              timeout_s=20.0)
    refusals['vqa, ESC'] = not response.success and 'U+001B' in response.message
    row.injections += 1
    result, _ = sim.run_task('x' * 2001, time_limit_s=5.0, timeout_s=30.0)
    refusals['RunTask, 2001 characters'] = result is None  # the goal was rejected
    counted = soon(lambda: int(planner_values(sim).get('refused_inputs', '0')) >= refused0 + 5,
                   20.0, 'five refusals counted on /diagnostics', [sim.procs['planner']])
    log = sim.procs['planner'].log_text()
    refusals['task, 5029 characters'] = 'task refused: 5029 characters' in log
    refusals['interjection, ESC'] = 'interjection refused' in log
    row.survived += sum(refusals.values())
    assert all(refusals.values()), refusals
    assert counted, 'the refusals were not counted on /diagnostics'
    assert sim.context.last.task == before.task and sim.context.last.revision >= before.revision
