"""The planner session without ROS: inputs in order on one worker, resets, boundaries,
executor revisions, RunTask judgement and VQA, with injected time and a scripted backend."""

from __future__ import annotations

import logging
import threading

import pytest

from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState
from lerobot_lang_nodes.core.planner_session import (PAUSE_REASON, BackendSlot,
                                                     PlannerSession, SessionConfig)


class Backend:
    """Subtask 'step <n>' per generation; interjections re-plan; VQA answers 'a cube'."""

    observes = ('ground_truth',)

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def generate(self, kind, messages, observation):
        self.gate.wait(10.0)
        self.calls.append(kind)
        if kind == 'subtask':
            return f'step {self.calls.count("subtask")}'
        if kind == 'interjection':
            return 'new plan <say>OK</say>'
        return 'a cube' if kind == 'vqa' else ''


class Observations:
    def __init__(self) -> None:
        self.truth: dict | None = None
        self.count = 0
        self.frames: dict = {}
        self.joint_state: tuple | None = None

    def version(self, sources):
        return tuple(self.count if s == 'ground_truth' else 0 for s in sources)

    def images(self):
        return dict(self.frames)

    def image(self, camera):
        return self.frames.get(camera)

    def ground_truth(self):
        return self.truth

    def joints(self):
        return self.joint_state


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def rig():
    backend = Backend()
    slot = BackendSlot()
    state = LanguageState()
    planner = HighLevelPlanner(slot, state, HighLevelConfig(high_level_hz=100.0))
    clock, mono = Clock(), Clock()
    logs: list[tuple[int, str]] = []
    speech: list[str] = []
    obs = Observations()
    session = PlannerSession(planner, slot, SessionConfig(max_text_chars=64, vqa_max_pending=1,
                                                          revision_wait_s=0.0),
                             obs, clock=clock, log=lambda lvl, text: logs.append((lvl, text)),
                             on_speech=speech.append, monotonic=mono)
    session.load(lambda: backend)
    session.start()
    yield session, backend, obs, clock, mono, logs, speech
    session.close()


def settle(session) -> None:
    """Every job submitted so far has run (the worker runs them in order)."""
    session.submit(lambda: None).result(timeout=10.0)


def test_load_states_and_a_failed_load_keeps_the_session_serving():
    slot = BackendSlot()
    assert slot.state == 'loading'
    with pytest.raises(RuntimeError, match='still loading'):
        slot.generate('subtask', [], None)
    logs = []
    session = PlannerSession(HighLevelPlanner(slot, LanguageState(), HighLevelConfig()), slot,
                             SessionConfig(backend='transformers'), Observations(),
                             clock=Clock(), log=lambda lvl, text: logs.append((lvl, text)))
    session.load(lambda: (_ for _ in ()).throw(OSError('no config.json')))
    session.start()
    try:
        session.on_task('put the red cube in the bowl')
        settle(session)
        assert slot.state == 'failed' and 'OSError: no config.json' in slot.error
        assert session.health() == ('error', slot.error)
        assert session.state.task == 'put the red cube in the bowl'  # the task is kept
        assert any('subtask generation ignored' in t for _l, t in logs)
    finally:
        session.close()


def test_task_direct_prefix_refusals_and_interjection_speech(rig):
    session, backend, _obs, _clock, _mono, logs, speech = rig
    session.on_task('  put the red cube in the bowl ')
    settle(session)
    assert (session.state.task, session.state.subtask) == ('put the red cube in the bowl',
                                                           'step 1')
    session.on_task('direct: open the gripper')
    settle(session)
    snap = session.state.snapshot()
    assert (snap.task, snap.subtask, snap.prior_subtask) == (
        'put the red cube in the bowl', 'open the gripper', 'step 1')
    session.on_task('x' * 65)
    session.on_task('bad\x1b[2J')
    assert session.refused_inputs == 2
    assert any(lvl == logging.WARNING and 'refused' in t for lvl, t in logs)
    session.on_interjection('   ')
    assert any('empty interjection' in t for _l, t in logs)
    session.on_interjection('use the blue cube')
    settle(session)
    assert speech == ['OK'] and session.state.plan == 'new plan'


def test_interjections_waiting_for_the_worker_coalesce_newest_wins(rig):
    session, backend, *_rest, speech = rig
    session.on_task('put the red cube in the bowl')
    settle(session)
    backend.gate.clear()  # the worker is busy in a generation
    session.submit(session.planner.regenerate, 0.0, None)
    session.on_interjection('first')
    session.on_interjection('second')
    session.on_interjection('third')
    assert session.interjections_coalesced == 2
    backend.gate.set()
    settle(session)
    assert backend.calls.count('interjection') == 1  # one answer, for the newest text


def test_a_reset_keeps_the_command_sent_after_it(rig):
    session, _backend, obs, *_rest = rig
    session.on_truth({'seed': 0}, 1_000)
    session.on_task('put the red cube in the bowl', sent_ns=2_000)
    settle(session)
    # The reset was published at 3_000, but its news arrives after a task sent at 4_000.
    session.on_task('put the blue cube in the bowl', sent_ns=4_000)
    session.on_truth({'seed': 1000}, 3_000)
    settle(session)
    assert session.state.task == 'put the blue cube in the bowl'
    assert session.scene_resets == 1 and session.values()['commands_kept_over_reset'] == 1
    # A reset with nothing sent after it clears the task.
    session.on_truth({'seed': 2000}, 5_000)
    settle(session)
    assert session.state.task == '' and session.scene_resets == 2


def test_refill_edges_and_a_stuck_queue_are_boundaries(rig):
    session, backend, obs, clock, mono, *_ = rig
    session.on_task('put the red cube in the bowl')
    settle(session)
    n = backend.calls.count('subtask')
    clock.t += 1.0  # past the regeneration throttle
    session.on_status(session.state.revision, 'action', False, 'exec')
    session.on_status(session.state.revision, 'action', True, 'exec')  # rising edge
    settle(session)
    assert backend.calls.count('subtask') == n + 1
    clock.t += 1.0
    session.on_status(session.state.revision, 'action', True, 'exec')  # no edge, not stuck
    settle(session)
    assert backend.calls.count('subtask') == n + 1
    mono.t += 1.0  # the queue stayed empty a throttle interval: look again
    session.on_status(session.state.revision, 'action', True, 'exec')
    settle(session)
    assert backend.calls.count('subtask') == n + 2


def test_executor_revision_followed_only_from_one_executor(rig):
    session, *_ = rig
    session.on_status(7, 'action', False, 'a')
    settle(session)
    assert session.state.revision == 8
    session.on_status(20, 'action', False, 'b')  # a second executor: not followed
    settle(session)
    assert session.state.revision == 8
    for i in range(12):
        session.on_status(8, 'action', False, 'ab'[i % 2])
    assert session.rival_executors() == 2


def test_run_task_judgement(rig):
    session, _backend, _obs, clock, *_ = rig
    task = 'put the red cube in the bowl'
    assert 'nothing judges success' in session.unjudged_goal_problem(0.0, False, '/o', task)
    assert session.unjudged_goal_problem(10.0, False, '/o', task) == ''
    assert session.unjudged_goal_problem(0.0, True, '/o', task) == ''
    session.start_goal(task, False).result(timeout=10.0)
    start_rev, start_s = session.state.revision, clock()
    assert session.judge(task, start_rev, start_s, 30.0) is None
    assert session.judge(task, start_rev, start_s, 30.0, cancel_requested=True).end == \
        'canceled'
    session.on_outcome(True, start_rev - 1, task, 'an older context')  # not this run's
    assert session.judge(task, start_rev, start_s, 30.0) is None
    clock.t += 1.0
    session.on_outcome(True, 0, task, 'the operator saw it done')
    verdict = session.judge(task, start_rev, start_s, 30.0)
    assert (verdict.end, verdict.message) == ('succeeded', 'succeeded: the operator saw it done')
    session.on_outcome(False, start_rev, task, 'not yet')
    clock.t += 31.0
    assert session.judge(task, start_rev, start_s, 30.0).message == 'time limit 30.0 s reached'
    session.on_task('put the blue cube in the bowl')
    settle(session)
    assert session.judge(task, start_rev, start_s, 0.0).end == 'aborted'


def test_progress_says_paused_why_and_how_to_resume(rig):
    session, *_ = rig
    session.on_task('put the red cube in the bowl')
    settle(session)
    session.note_published(session.state.snapshot())  # as the node does after each job
    assert session.progress(session.state.snapshot(), '/resume') == 'subtask 1: step 1'
    session.set_mode('paused').result(timeout=10.0)
    line = session.progress(session.state.snapshot(), '/resume')
    assert PAUSE_REASON in line and 'ros2 service call /resume' in line
    session.paused_for_question('what is in the gripper?')
    assert "question 'what is in the gripper?'" in session.progress(
        session.state.snapshot(), '/resume')
    session.on_status(session.state.revision, 'action', False, 'exec')
    assert session.pause_reason == PAUSE_REASON


def test_vqa_busy_problem_and_answer(rig):
    session, _backend, obs, *_ = rig
    assert session.vqa_problem('what is in the gripper?', 'front') == \
        "no image received yet from camera 'front'"
    obs.frames['front'] = object()
    assert session.vqa_problem('what is in the gripper?', 'front') == ''
    assert session.vqa_slot()
    assert not session.vqa_slot() and session.vqa_busy == 1  # vqa_max_pending = 1
    session.vqa_done()
    assert session.answer_vqa('what is in the gripper?', 'front') == 'a cube'


def test_close_ends_a_wait_for_the_executor_at_once():
    """A planner stopped while it waits for the executor's first status (revision_wait_s)
    ends then, instead of outliving its shutdown (Ctrl-C under ros2 launch took 5 s)."""
    slot = BackendSlot()
    session = PlannerSession(HighLevelPlanner(slot, LanguageState(), HighLevelConfig()), slot,
                             SessionConfig(revision_wait_s=60.0), Observations(),
                             clock=Clock(), log=lambda _lvl, _text: None)
    session.load(Backend)
    session.start_at_executor_revision(lambda: True)  # an executor exists but says nothing
    session.start()
    waiting = session.submit(lambda: 'after the wait')
    assert not waiting.done()
    session.close(timeout_s=5.0)
    assert not session._worker.is_alive()


def test_the_simulator_s_reset_stamp_orders_the_reset_not_the_sample_that_brought_it(rig):
    """The first sample of a new scene may be replaced (latched depth 1) before a busy
    planner takes it: the later one carries the reset's own time."""
    session, *_ = rig
    session.on_truth({'seed': 0, 'reset_ns': 500}, 1_000)
    session.on_task('put the red cube in the bowl', sent_ns=2_000)
    settle(session)
    session.on_task('put the blue cube in the bowl', sent_ns=4_000)  # after the reset's answer
    # Reset at 3_000; the sample that reaches the planner was sent at 5_000.
    session.on_truth({'seed': 1000, 'reset_ns': 3_000}, 5_000)
    settle(session)
    assert session.state.task == 'put the blue cube in the bowl'


def test_the_planner_goes_on_during_teleop_and_a_handback_starts_a_revision(rig):
    """A human's demonstration still gets its subtasks: in teleop no chunk boundary comes (the
    policy is idle, needs_refill false), so the planner regenerates at its throttled rate."""
    session, backend, obs, clock, mono, *_ = rig
    session.on_task('put the red cube in the bowl')
    settle(session)
    session.on_status(session.state.revision, 'teleop', False, 'exec')
    settle(session)
    assert session.state.mode == 'teleop'
    n = backend.calls.count('subtask')
    for _ in range(2):
        clock.t += 1.0
        mono.t += 1.0
        session.on_status(session.state.revision, 'teleop', False, 'exec')
        settle(session)
    assert backend.calls.count('subtask') >= n + 2
    before = session.state.snapshot()
    session.on_status(session.state.revision, 'action', False, 'exec')  # the hand-back
    settle(session)
    after = session.state.snapshot()
    assert after.mode == 'action' and after.flush_revision > before.revision


def test_the_latest_joint_state_is_in_the_observation_and_the_subtask_prompt():
    """The node's joint state (names, radians) is part of what every look sees; a prompts
    file with {joints} quotes it; before any joint state the line is left out."""
    import numpy as np

    from lerobot_lang_nodes.core import prompts

    class Recorder(Backend):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, dict]] = []

        def generate(self, kind, messages, observation):
            self.seen.append((messages[0]['content'], observation))
            return super().generate(kind, messages, observation)

    backend, slot, obs = Recorder(), BackendSlot(), Observations()
    planner = HighLevelPlanner(slot, LanguageState(), HighLevelConfig(enable_memory=False),
                               prompts.PromptTemplates(subtask='{task}\nJoints: {joints}'))
    session = PlannerSession(planner, slot, SessionConfig(revision_wait_s=0.0), obs,
                             clock=Clock(), log=lambda lvl, text: None)
    session.load(lambda: backend)
    session.start()
    try:
        session.on_task('put the red cube in the bowl')
        settle(session)
        obs.joint_state = (['shoulder_pan', 'gripper'], np.array([0.4, 1.0]))
        session.on_task('put the blue cube in the bowl')
        settle(session)
    finally:
        session.close()
    (first, seen_first), (second, seen_second) = backend.seen
    assert first == 'put the red cube in the bowl' and 'joint_names' not in seen_first
    assert second == 'put the blue cube in the bowl\nJoints: 1.00 0.40'
    assert seen_second['joint_names'] == ['shoulder_pan', 'gripper']
    assert list(seen_second['joint_positions']) == [0.4, 1.0]
