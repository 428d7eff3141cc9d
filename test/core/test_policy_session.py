"""The ROS-free policy session (core/policy_session.py): no DDS, both clocks are the test's.

What the policy infers for (instruction, revision, flush revision), and what becomes of each
result: timeout, expiry, in-flight discard, publication, the counters and latencies on
/diagnostics, the inference log and the RTC continuation of the chunk being played.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from lerobot_lang_nodes.core.inference_file import InferenceFile, read_inference_file
from lerobot_lang_nodes.core.policy_session import (Joints, PolicySession, SessionConfig,
                                                    StatusReport)

P = 0.1  # control period (s)
REFILL = StatusReport(acting=True, needs_refill=True, revision=1, flush_revision=1,
                      control_period_s=P)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Rig:
    """A session with stepped clocks: ``mono`` (latency, rate, log) and ``ros`` (stamps)."""

    def __init__(self, tmp_path=None, **cfg) -> None:
        self.mono = Clock(100.0)
        self.ros = Clock(50.0)
        self.logs: list[tuple[int, str]] = []
        self.log_path = tmp_path / 'inference.jsonl' if tmp_path is not None else None
        self.session = PolicySession(
            # Freshness off unless a test sets it: the rig steps time without new joints.
            SessionConfig(**{'max_inference_hz': 1000.0, 'max_observation_age_s': 0.0,
                             **cfg}), monotonic=self.mono,
            clock=self.ros, emit=lambda level, text: self.logs.append((level, text)),
            inference_log=InferenceFile(self.log_path) if self.log_path else None)
        self.session.on_joints(Joints(('a', 'b'), np.zeros(2), stamp_s=self.ros.t))

    def context(self, revision: int, flush: int = 0, subtask: str = 'pick red',
                task: str = 'tidy') -> None:
        self.session.on_context(task, subtask, revision, flush)

    def status(self, **kw) -> None:
        base = {'acting': True, 'needs_refill': True, 'revision': 1, 'flush_revision': 1,
                'control_period_s': P}
        self.session.on_status(StatusReport(**{**base, **kw}))

    def observe(self) -> None:
        """A fresh joint state stamped now."""
        self.session.on_joints(Joints(('a', 'b'), np.zeros(2), stamp_s=self.ros.t))

    def run(self, seconds: float, rows: int = 10, **kw):
        """Start an inference, let it take ``seconds`` on both clocks, hand in ``rows``."""
        job = self.session.start(**kw)
        assert job is not None
        self.step(seconds)
        return job, self.session.finished(job, np.ones((rows, 2)))

    def step(self, seconds: float) -> None:
        self.mono.t += seconds
        self.ros.t += seconds

    def values(self) -> dict:
        return self.session.diagnostics()[2]


# --- what to infer for ----------------------------------------------------------------------
def test_context_instruction_is_the_subtask_else_the_task_and_flush_zero_means_revision():
    rig = Rig()
    rig.status()
    rig.context(revision=1, flush=0, subtask='  ')
    job = rig.session.start()
    assert (job.instruction, job.revision, job.flush_revision) == ('tidy', 1, 1)
    assert job.observation['instruction'] == 'tidy'
    rig.context(revision=2, flush=1, subtask='pick red')
    rig.step(0.01)
    rig.session.finished(job, np.ones((10, 2)))
    rig.status(last_accepted_sequence=1, revision=2)
    job = rig.session.start()
    assert (job.instruction, job.revision, job.flush_revision) == ('pick red', 2, 1)


def test_task_conditioned_policy_counts_a_revision_per_new_task_text():
    rig = Rig(condition_on='task')
    rig.status()
    assert rig.session.start() is None  # no task yet
    rig.session.on_task('put the red cube in the bowl')
    rig.session.on_task('put the red cube in the bowl')  # the same text: no new revision
    job = rig.session.start()
    assert (job.revision, job.flush_revision, job.context_wall) == (1, 1, None)
    rig.session.on_task('pick up the green cube')
    rig.step(0.01)
    assert rig.session.finished(job, np.ones((10, 2))) is None  # an operator change came
    job = rig.session.start()
    assert (job.instruction, job.revision) == ('pick up the green cube', 2)


def test_context_wall_is_when_the_revision_arrived_not_a_repeat_of_it():
    rig = Rig()
    rig.status()
    rig.context(revision=1)
    arrived = rig.mono.t
    rig.mono.t += 0.5
    rig.context(revision=1)  # the same revision again (latched re-delivery, a memory change)
    job = rig.session.start()
    assert job.context_wall == arrived and job.start == rig.mono.t


@pytest.mark.parametrize('missing', ['ready', 'status', 'stale', 'paused', 'context'])
def test_no_inference_without_its_inputs(missing):
    rig = Rig(status_timeout_s=2.0)
    if missing != 'status':
        rig.status(acting=missing != 'paused')
    if missing != 'context':
        rig.context(revision=1)
    if missing == 'stale':
        rig.mono.t += 2.5
    assert rig.session.start(ready=missing != 'ready') is None
    rig2 = Rig()
    rig2.status()
    rig2.context(revision=1)
    assert rig2.session.start() is not None


def test_the_observation_carries_the_joints_the_stamps_and_what_observe_adds():
    rig = Rig()
    rig.status(control_period_s=0.0)  # not announced: the executor's own
    rig.context(revision=1)
    rig.ros.t += 0.03
    job = rig.session.start(observe=lambda: {'images': {'front': 1}, 'ground_truth': None})
    obs = job.observation
    assert obs['joint_names'] == ['a', 'b'] and obs['images'] == {'front': 1}
    assert obs['stamp_s'] == obs['chunk_stamp_s'] == 50.0
    assert obs['clock_start_s'] == 50.03 and obs['control_period_s'] is None
    assert 'rtc' not in obs  # a backend without RTC


# --- what becomes of a result ---------------------------------------------------------------
def test_published_chunk_has_the_next_sequence_and_is_awaited_until_acknowledged():
    rig = Rig()
    rig.status()
    rig.context(revision=1)
    job, chunk = rig.run(0.05)
    assert chunk.sequence == 1 and chunk.revision == 1 and chunk.flush_revision == 1
    assert chunk.stamp_s == job.observation['stamp_s'] and chunk.period_s == P
    assert chunk.instruction == 'pick red' and chunk.values.shape == (10, 2)
    rig.session.sent()
    rig.step(0.1)
    assert rig.session.start() is None  # one chunk in flight
    rig.status(last_accepted_sequence=1)
    _, chunk = rig.run(0.05)
    assert chunk.sequence == 2
    rig.session.send_failed(chunk, 'RCLError: refused')  # it never reached the executor
    assert rig.session.counts.failures == 1
    assert (logging.ERROR, 'publishing chunk 2 failed: RCLError: refused') in rig.logs
    rig.step(0.1)
    assert rig.session.start() is not None  # without awaiting its ack


def test_a_result_for_an_older_operator_change_is_discarded_one_for_an_older_subtask_is_not():
    rig = Rig()
    rig.status()
    rig.context(revision=1, flush=1)
    job = rig.session.start()
    rig.context(revision=2, flush=1, subtask='place in bowl')  # the planner moved on
    rig.step(0.05)
    assert rig.session.finished(job, np.ones((10, 2))).revision == 1
    rig.status(last_accepted_sequence=1, revision=2)
    job = rig.session.start()
    rig.context(revision=3, flush=3, subtask='pick blue')  # an operator change
    rig.step(0.05)
    assert rig.session.finished(job, np.ones((10, 2))) is None
    assert rig.session.counts.discarded_in_flight == 1
    assert rig.session.last_outcome == 'ok'  # the inference itself went well
    assert (logging.INFO, 'discarded a chunk computed for revision 2; an operator change '
            'came at revision 3') in rig.logs
    job = rig.session.start()  # the new revision at once, without awaiting an ack
    assert (job.revision, job.flush_revision) == (3, 3)


def test_an_inference_longer_than_the_timeout_is_counted_and_not_published():
    rig = Rig(inference_timeout_s=0.5)
    rig.status()
    rig.context(revision=1)
    _, chunk = rig.run(0.6)
    assert chunk is None
    assert rig.session.counts.timeouts == 1 and rig.session.counts.inferences == 1
    assert rig.session.diagnostics()[:2] == ('warn',
                                             'last inference exceeded inference_timeout_s')
    rig.observe()
    _, chunk = rig.run(0.4)
    assert chunk is not None and rig.session.counts.timeouts == 1
    off = Rig(inference_timeout_s=0.0)
    off.status()
    off.context(revision=1)
    assert off.run(30.0, rows=1000)[1] is not None  # 0 disables it (and 1000 rows last)


def test_a_chunk_wholly_in_the_past_is_dropped_once_then_published():
    rig = Rig()
    rig.status()
    rig.context(revision=1)
    _, chunk = rig.run(1.0, rows=10)  # 10 rows x 0.1 s: the last one was due at +0.9 s
    assert chunk is None and rig.session.counts.expired == 1
    assert rig.session.last_outcome == 'expired'
    assert rig.session.diagnostics()[0] == 'warn'
    _, chunk = rig.run(1.0, rows=10)  # two in a row: the executor judges
    assert chunk is not None and rig.session.counts.expired == 1
    rig.status(last_accepted_sequence=1)
    rig.observe()
    _, chunk = rig.run(0.95, rows=10)  # the last row is still ahead
    assert chunk is not None and rig.session.counts.expired == 1


def test_a_failed_inference_is_counted_with_its_error_and_the_next_one_retries():
    rig = Rig()
    rig.status()
    rig.context(revision=1)
    job = rig.session.start()
    rig.session.failed(job, RuntimeError('CUDA out of memory'))
    assert rig.session.counts.failures == 1 and rig.session.counts.inferences == 0
    level, message, values = rig.session.diagnostics()
    assert (level, message) == ('warn', 'last inference failed: RuntimeError: CUDA out of '
                                        'memory')
    assert values['last_error'] == 'RuntimeError: CUDA out of memory'
    rig.step(0.01)
    _, chunk = rig.run(0.05)
    rig.session.sent()
    assert chunk.sequence == 1
    assert rig.session.diagnostics()[:2] == ('ok', '1 chunks published')


def test_latencies_and_the_running_inference_on_diagnostics():
    rig = Rig(inference_timeout_s=1.0)
    rig.status()
    rig.context(revision=1)
    for seconds, ack in ((0.2, 1), (0.1, 2), (0.4, 3)):
        rig.run(seconds)
        rig.session.sent()
        rig.status(last_accepted_sequence=ack)
    v = rig.values()
    assert v['inferences'] == 3 and v['chunks_published'] == 3
    assert v['latency_last_ms'] == pytest.approx(400.0)
    assert v['latency_p50_ms'] == pytest.approx(200.0)
    assert v['latency_mean_ms'] == pytest.approx(700.0 / 3)
    rig.session.start()
    rig.mono.t += 1.5
    level, message, v = rig.session.diagnostics()
    assert v['inference_running_s'] == pytest.approx(1.5)
    assert (level, message) == ('warn', 'inference running for 1.5 s (timeout 1.0 s)')


def test_the_inference_log_has_one_record_per_outcome(tmp_path):
    rig = Rig(tmp_path, inference_timeout_s=0.5)
    rig.status()
    rig.context(revision=1, flush=1)
    wall = rig.mono.t
    rig.mono.t += 0.25
    rig.run(0.1)  # published
    rig.status(last_accepted_sequence=1)
    rig.run(0.6)  # timeout
    rig.ros.t += 0.5  # the joint state is 1.2 s old
    rig.run(0.1)  # expired
    job = rig.session.start()
    rig.session.failed(job, ValueError('bad'))
    rig.step(0.01)
    rig.observe()
    job = rig.session.start()
    rig.context(revision=2, flush=2)
    rig.step(0.1)
    rig.session.finished(job, np.ones((10, 2)))  # discarded
    records = read_inference_file(rig.log_path)
    assert [r['outcome'] for r in records] == ['published', 'timeout', 'expired', 'failed',
                                               'discarded']
    first = records[0]
    assert first['context_wall'] == wall and first['start'] == pytest.approx(wall + 0.25)
    assert first['latency_s'] == pytest.approx(0.1) and first['sequence'] == 1
    assert first['stamp'] == 50.0 and first['rtc_delay'] is None
    assert [r['sequence'] for r in records[1:]] == [None] * 4
    assert records[-1]['revision'] == 1 and records[-1]['flush_revision'] == 1


# --- real-time chunking ---------------------------------------------------------------------
def test_rtc_continues_the_chunk_the_executor_plays_and_stamps_where_it_joins():
    rig = Rig(rtc=True)
    rig.status()
    rig.context(revision=1)
    job = rig.session.start()
    assert job.observation['rtc'] is None  # nothing played yet
    rig.step(0.25)
    chunk = rig.session.finished(job, np.ones((10, 2)), model_actions=np.arange(20.0)
                                 .reshape(10, 2))
    stamp = chunk.stamp_s
    rig.status(last_accepted_sequence=1, last_chunk_sequence=1, queue_depth=5)
    rig.ros.t = stamp + 0.42  # the executor plays row 4
    job = rig.session.start()
    cont = job.observation['rtc']
    assert cont is not None and cont.sequence == 1
    np.testing.assert_array_equal(cont.left_over, np.arange(20.0).reshape(10, 2)[5:])
    assert cont.inference_delay == 3  # ceil(0.25 s on the executor's clock / 0.1 s)
    assert job.observation['chunk_stamp_s'] == pytest.approx(stamp + 0.5)
    v = rig.values()
    assert v['rtc_guided'] == 1 and v['rtc_delay_steps'] == 3
    rig.step(0.05)
    chunk = rig.session.finished(job, np.ones((10, 2)), model_actions=np.zeros((10, 2)))
    assert chunk.stamp_s == pytest.approx(stamp + 0.5)
    rig.status(last_accepted_sequence=2, last_chunk_sequence=2, queue_depth=0)
    assert rig.session.start().observation['rtc'] is None  # the queue ran dry
