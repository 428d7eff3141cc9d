"""The hierarchical language loop: throttled regeneration, memory, direct mode, failures."""

from __future__ import annotations

import inspect
import logging
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_lang_nodes.core import high_level
from lerobot_lang_nodes.core.errors import ConfigError
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner, TextGenerator
from lerobot_lang_nodes.core.language import LanguageState


class ScriptedGenerator:
    """Returns scripted outputs per kind (an Exception instance is raised) and records calls."""

    def __init__(self, **scripts) -> None:
        self.scripts = {kind: deque(outs) for kind, outs in scripts.items()}
        self.calls: list[tuple[str, list, object]] = []

    def generate(self, kind, messages, observation):
        self.calls.append((kind, messages, observation))
        out = self.scripts[kind].popleft() if self.scripts.get(kind) else ''
        if isinstance(out, BaseException):
            raise out
        return out

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


def make(cfg=None, **scripts):
    gen = ScriptedGenerator(**scripts)
    planner = HighLevelPlanner(gen, LanguageState(), cfg or HighLevelConfig())
    return gen, planner


def test_the_core_calls_a_generator_as_the_protocol_says_and_takes_its_text():
    """What a TextGenerator implementation relies on, and what it gives: generate(kind,
    messages, observation) called with the kind, chat turns holding the task and the
    observation the caller passed, and the text it returns becoming the subtask. (An
    isinstance check against the runtime-checkable Protocol only sees that some `generate`
    exists.) The project's planner backends take those three arguments."""
    from lerobot_lang_nodes.backends.planners.scripted import ScriptedPlanner
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    gen, planner = make(subtask=['reach the red cube'])
    planner.set_task('put the red cube in the bowl')
    observation = {'images': {'front': object()}}
    planner.regenerate(0.0, observation)
    kind, messages, seen = gen.calls[0]
    assert kind == 'subtask' and seen is observation
    assert all(m['role'] in ('system', 'user', 'assistant') for m in messages)
    assert any('put the red cube in the bowl' in m['content'] for m in messages)
    assert planner.state.subtask == 'reach the red cube'
    for cls in (ScriptedGenerator, ScriptedPlanner, TransformersPlanner):
        # As _generate calls it (raises TypeError if the signature cannot take it).
        inspect.signature(cls.generate).bind(object(), kind, messages, observation)
    assert list(inspect.signature(TextGenerator.generate).parameters) == \
        ['self', 'kind', 'messages', 'observation']


class SteppedClock:
    """time.monotonic for high_level: moves only when a generation 'takes' time."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_the_latency_in_stats_is_each_generator_call_s_duration(monkeypatch):
    clock = SteppedClock()
    monkeypatch.setattr(high_level, 'time', clock)

    class Slow(ScriptedGenerator):
        def generate(self, kind, messages, observation):
            clock.now += {'subtask': 0.25, 'memory': 0.5}[kind]  # the call takes this long
            return super().generate(kind, messages, observation)

    gen = Slow(subtask=['a', TimeoutError('max_time'), 'b'], memory=['m', 'n'])
    planner = HighLevelPlanner(gen, LanguageState(), HighLevelConfig())
    planner.set_task('t')
    for now in (0.0, 1.0, 2.0):
        planner.regenerate(now)
    stats = planner.stats()
    assert stats['timeouts.subtask'] == 1  # a timed-out call counts its time too
    assert (stats['latency_last_s.subtask'], stats['latency_p50_s.subtask'],
            stats['latency_mean_s.subtask']) == (0.25, 0.25, 0.25)
    assert stats['latency_last_s.memory'] == 0.5


def test_config_validation():
    for kw, field in [({'chunks_per_regen': 0}, 'chunks_per_regen'),
                      ({'high_level_hz': -1}, 'high_level_hz'),
                      ({'min_new_tokens': -1}, 'min_new_tokens'),
                      ({'temperature': -0.5}, 'temperature'),
                      ({'top_p': 0.0}, 'top_p'),
                      ({'subtask_confirmations': 0}, 'subtask_confirmations'),
                      ({'subtask_confirmations': 2.0}, 'subtask_confirmations')]:
        with pytest.raises(ConfigError) as err:
            HighLevelConfig(**kw)
        assert err.value.field == field
    assert HighLevelConfig(temperature=0.7).generation_kwargs() == {
        'min_new_tokens': 0, 'temperature': 0.7, 'top_p': 1.0}


def test_first_boundary_generates_subtask_then_memory():
    gen, planner = make(subtask=['pick cup'], memory=['started'])
    planner.set_task('clean the table')
    obs = {'frame': 1}
    assert planner.on_chunk_boundary(0.0, obs)
    assert gen.kinds() == ['subtask', 'memory']
    assert gen.calls[0][1] == [{'role': 'user', 'content': 'clean the table'}]
    assert gen.calls[0][2] is obs
    # First memory: no previous memory and no completed subtask to quote.
    assert gen.calls[1][1] == [{'role': 'user', 'content': 'clean the table'}]
    s = planner.state
    assert (s.subtask, s.memory, planner.last_outcome) == ('pick cup', 'started', 'changed')


def test_memory_regenerated_only_on_change_with_prior_context():
    gen, planner = make(HighLevelConfig(high_level_hz=float('inf')),
                        subtask=['a', 'a', 'b'], memory=['m1', 'm2'])
    planner.set_task('t')
    for k in range(3):
        planner.on_chunk_boundary(float(k), None)
    assert gen.kinds() == ['subtask', 'memory', 'subtask', 'subtask', 'memory']
    assert gen.calls[4][1] == [
        {'role': 'user', 'content': 't'},
        {'role': 'assistant', 'content': 'Previous memory: m1'},
        {'role': 'user', 'content': 'Completed subtask: a'},
    ]
    s = planner.state
    assert (s.subtask, s.prior_subtask, s.memory, s.total_repeats) == ('b', 'a', 'm2', 1)


def test_memory_disabled():
    gen, planner = make(HighLevelConfig(enable_memory=False), subtask=['a'])
    planner.set_task('t')
    planner.regenerate(0.0, None)
    assert gen.kinds() == ['subtask']


def test_throttle_by_chunks_and_hz():
    gen, planner = make(HighLevelConfig(chunks_per_regen=2, high_level_hz=1.0,
                                        enable_memory=False))
    planner.set_task('t')
    ran = [planner.on_chunk_boundary(t, None) for t in (0.0, 0.3, 0.6, 1.2, 1.5, 1.8)]
    # t=0: first boundary; 0.6: two chunks but < 1 s; 1.2: both hold; 1.8: too soon again.
    assert ran == [True, False, False, True, False, False]
    assert planner.on_chunk_boundary(2.5, None)


def test_no_generation_without_task_or_while_paused():
    gen, planner = make()
    assert not planner.on_chunk_boundary(0.0, None)
    planner.set_task('t')
    planner.state.set_mode('paused')
    assert not planner.on_chunk_boundary(1.0, None)
    assert gen.calls == []
    assert planner.regenerate(0.0, None) == 'empty'  # unthrottled, still needs a task only


def test_new_task_rearms_throttle():
    gen, planner = make(HighLevelConfig(chunks_per_regen=5, enable_memory=False))
    planner.set_task('t1')
    assert planner.on_chunk_boundary(0.0, None)
    planner.set_task('t2')
    assert planner.on_chunk_boundary(0.1, None)
    assert gen.calls[-1][1] == [{'role': 'user', 'content': 't2'}]


def test_direct_subtask_mode_never_generates():
    gen, planner = make()
    planner.set_task('put the cup in the sink', direct_subtask=True)
    s = planner.state
    assert (s.subtask, s.source, planner.direct) == ('put the cup in the sink', 'operator', True)
    assert not planner.on_chunk_boundary(0.0, None)
    assert gen.calls == []
    planner.set_task('generate again')
    assert not planner.direct and planner.on_chunk_boundary(1.0, None)


def test_direct_subtask_from_config():
    gen, planner = make(HighLevelConfig(direct_subtask=True))
    planner.set_task('wipe')
    assert planner.state.subtask == 'wipe' and planner.direct
    assert not planner.on_chunk_boundary(0.0, None) and gen.calls == []


def test_generator_failure_is_counted_and_logged(caplog):
    gen, planner = make(subtask=[RuntimeError('cuda oom'), 'a'], memory=[ValueError('bad')])
    planner.set_task('t')
    with caplog.at_level(logging.WARNING, logger='lerobot_lang_nodes.core.high_level'):
        assert planner.regenerate(0.0, None) == 'failed'
        assert planner.regenerate(1.0, None) == 'changed'
    assert planner.failures == {'subtask': 1, 'memory': 1}
    assert planner.state.subtask == 'a' and planner.state.memory == ''
    assert any('cuda oom' in r.getMessage() for r in caplog.records)


def test_failed_regeneration_still_marks_throttle():
    gen, planner = make(HighLevelConfig(high_level_hz=1.0), subtask=[RuntimeError('x')])
    planner.set_task('t')
    assert planner.on_chunk_boundary(0.0, None)
    assert not planner.on_chunk_boundary(0.5, None)


def test_empty_generations_are_dropped_and_counted():
    gen, planner = make(subtask=['a', ''], memory=['  '])
    planner.set_task('t')
    planner.regenerate(0.0, None)
    assert planner.regenerate(1.0, None) == 'empty'
    assert planner.state.empty == {'memory': 1, 'subtask': 1}
    assert planner.state.subtask == 'a'


def test_non_string_output_is_a_failure():
    gen, planner = make(subtask=[42])
    planner.set_task('t')
    assert planner.regenerate(0.0, None) == 'failed' and planner.failures == {'subtask': 1}


def test_subtask_generated_for_an_old_task_is_discarded():
    planner_ref = {}

    class SlowGenerator(ScriptedGenerator):
        def generate(self, kind, messages, observation):
            planner_ref['p'].state.set_task('operator changed the task meanwhile')
            return 'subtask for the old task'

    planner = HighLevelPlanner(SlowGenerator(), LanguageState())
    planner_ref['p'] = planner
    planner.set_task('old task')
    assert planner.regenerate(0.0, None) == 'stale'
    assert planner.state.subtask == '' and planner.discarded == {'subtask': 1}


def test_interjection_sets_plan_and_returns_speech():
    gen, planner = make(interjection=['go left first <say>"Sure, going left"</say>'])
    planner.set_task('clean')
    rev = planner.state.revision
    plan, speech = planner.interject('do the left side first', {'o': 1})
    assert (plan, speech) == ('go left first', 'Sure, going left')
    assert gen.calls[0][0:2] == ('interjection', [
        {'role': 'user', 'content': 'clean'},
        {'role': 'user', 'content': 'do the left side first'}])
    assert planner.state.plan == 'go left first' and planner.state.revision == rev


def test_interjection_speech_only_keeps_plan():
    gen, planner = make(interjection=['first plan', '<say>ok</say>', ''])
    planner.set_task('clean')
    planner.interject('a', None)
    assert planner.interject('b', None) == ('', 'ok')
    assert planner.state.plan == 'first plan'
    assert planner.interject('c', None) == ('', '')
    assert planner.state.empty == {'interjection': 1}
    assert planner.interject('   ', None) == ('', '') and len(gen.calls) == 3


def test_interjection_failure():
    gen, planner = make(interjection=[RuntimeError('boom')])
    planner.set_task('clean')
    assert planner.interject('hey', None) == ('', '')
    assert planner.failures == {'interjection': 1}


def test_vqa_answer_empty_and_failure():
    image = object()
    gen, planner = make(vqa=['  a red cup ', '', RuntimeError('x')])
    assert planner.answer_vqa('what is there?', image, 'wrist', None) == 'a red cup'
    msgs = gen.calls[0][1]
    assert msgs[0]['content'][0] == {'type': 'image', 'image': image, 'camera': 'wrist'}
    assert msgs[0]['content'][1] == {'type': 'text', 'text': 'what is there?'}
    assert planner.answer_vqa('again?', image) == ''
    assert planner.state.empty == {'vqa': 1}
    assert planner.answer_vqa('and now?', image) == ''
    assert planner.failures == {'vqa': 1}


def test_timeouts_latency_and_counters_reach_stats():
    gen, planner = make(subtask=['a', TimeoutError('max_time'), ''], memory=['m'])
    planner.set_task('t')
    planner.regenerate(0.0)
    assert planner.regenerate(1.0) == 'failed'
    assert planner.state.subtask == 'a'  # a timeout leaves the active subtask in place
    planner.regenerate(2.0)
    stats = planner.stats()
    assert (stats['timeouts.subtask'], stats['failures.subtask'], stats['empty.subtask']) == \
        (1, 1, 1)
    assert stats['last_raw.subtask'] == '' and stats['last_raw.memory'] == 'm'
    assert 'latency_p50_s.memory' in stats  # values: the test above
    assert 'latency_last_s.vqa' not in stats and stats['failures.vqa'] == 0


def test_subtask_prompt_carries_the_plan_through_the_template():
    from lerobot_lang_nodes.core.prompts import PromptTemplates
    gen = ScriptedGenerator(subtask=['a', 'b'], interjection=['use blue <say>ok</say>'])
    planner = HighLevelPlanner(gen, LanguageState(), HighLevelConfig(enable_memory=False),
                               PromptTemplates(subtask='{task}\nPlan: {plan}'))
    planner.set_task('red')
    planner.regenerate(0.0)
    planner.interject('blue instead')
    planner.regenerate(1.0)
    subtask_prompts = [c[1][0]['content'] for c in gen.calls if c[0] == 'subtask']
    assert subtask_prompts == ['red', 'red\nPlan: use blue']


def test_boundary_look_waits_for_a_newer_observation():
    # With `observed`, a boundary's regeneration runs on the first observation newer than the
    # one current at the boundary, not on the (possibly old) one the boundary found.
    gen, planner = make(HighLevelConfig(high_level_hz=5.0), subtask=['a', 'a', 'b'])
    planner.set_task('t')
    assert planner.regenerate(0.0, None) == 'changed'
    assert not planner.on_chunk_boundary(0.3, {'v': 1}, observed=(1,))
    assert not planner.look(0.32, {'v': 1}, observed=(1,))  # nothing newer yet
    assert gen.kinds().count('subtask') == 1
    assert planner.look(0.35, {'v': 2}, observed=(2,))  # the next observation: looked at
    assert [c[2] for c in gen.calls if c[0] == 'subtask'][-1] == {'v': 2}
    # One look per boundary: a newer observation without a new boundary does not look.
    assert not planner.look(0.6, {'v': 3}, observed=(3,))
    # The throttle still bounds it: a boundary 0.1 s after the last look waits for 0.2 s.
    assert not planner.on_chunk_boundary(0.45, {'v': 3}, observed=(3,))
    assert not planner.look(0.5, {'v': 4}, observed=(4,))
    assert planner.look(0.56, {'v': 5}, observed=(5,))
    assert planner.state.subtask == 'b'


def test_boundary_look_runs_without_news_after_one_throttle_interval():
    # Observations that stopped coming (or a backend that sees none) do not stall the loop.
    gen, planner = make(HighLevelConfig(high_level_hz=5.0), subtask=['a', 'b', 'c'])
    planner.set_task('t')
    planner.regenerate(0.0, None)
    assert not planner.on_chunk_boundary(0.3, None, observed=(1,))
    assert not planner.on_chunk_boundary(0.4, None, observed=(1,))  # still the same one
    assert planner.on_chunk_boundary(0.5, None, observed=(1,))  # 0.2 s after the first
    assert planner.on_chunk_boundary(1.0, None)  # observed None: at once, as before
    assert planner.state.subtask == 'c'


def test_look_does_nothing_without_a_pending_boundary_or_task():
    gen, planner = make(subtask=['a'])
    assert not planner.look(5.0, None, observed=(1,))  # no task
    planner.set_task('t')
    planner.regenerate(0.0, None)
    assert not planner.look(5.0, None, observed=(2,))  # no boundary since
    assert gen.kinds() == ['subtask', 'memory']


def test_a_changed_subtask_is_announced_before_the_memory_is_generated():
    gen, planner = make(subtask=['pick cup', 'pick cup', 'place cup'], memory=['a', 'b'])
    announced = []
    planner.on_subtask_changed = lambda: announced.append(
        (planner.state.subtask, planner.state.memory, len(gen.calls)))
    planner.set_task('clean the table')
    planner.regenerate(0.0)
    # The subtask was set and announced after its own generation, before memory's.
    assert announced == [('pick cup', '', 1)] and gen.kinds() == ['subtask', 'memory']
    planner.regenerate(1.0)  # a repeat: nothing to announce, no memory
    assert len(announced) == 1
    planner.regenerate(2.0)
    assert announced[-1] == ('place cup', 'a', 4)


def test_a_new_subtask_waits_for_confirmations_in_a_row():
    # Three looks in a row must answer 'b' before the planner leaves 'a'; a look that
    # answers 'a' again (or something else) starts the count over.
    gen, planner = make(HighLevelConfig(subtask_confirmations=3),
                        subtask=['a', 'b', 'b', 'a', 'b', 'c', 'b', 'b', 'b'],
                        memory=['m1', 'm2'])
    planner.set_task('t')
    outcomes = [planner.regenerate(float(k)) for k in range(9)]
    assert outcomes == ['changed', 'unconfirmed', 'unconfirmed', 'repeat', 'unconfirmed',
                        'unconfirmed', 'unconfirmed', 'unconfirmed', 'changed']
    s = planner.state
    assert (s.subtask, s.prior_subtask, s.memory, s.revision) == ('b', 'a', 'm2', 3)
    assert planner.unconfirmed == 6
    # Memory is generated only for the two changes.
    assert gen.kinds().count('memory') == 2


def test_confirmations_never_delay_the_first_subtask_or_an_operator_change():
    gen, planner = make(HighLevelConfig(subtask_confirmations=5), subtask=['a', 'b'])
    planner.set_task('t')
    assert planner.regenerate(0.0) == 'changed'  # nothing to leave yet
    # An interjection's re-plan is the operator's change: it goes through at once.
    assert planner.regenerate(1.0, flush=True) == 'changed'
    assert planner.state.subtask == 'b'


def test_a_pending_change_does_not_survive_a_new_revision():
    gen, planner = make(HighLevelConfig(subtask_confirmations=2),
                        subtask=['a', 'b', 'a', 'b', 'b'])
    planner.set_task('t')
    assert planner.regenerate(0.0) == 'changed'
    assert planner.regenerate(1.0) == 'unconfirmed'  # 'b' once
    planner.set_task('t2')  # the operator's new task: a new revision
    assert planner.regenerate(2.0) == 'changed'  # 'a', the new task's first subtask
    # The 'b' seen under the old task does not count towards the new one.
    assert planner.regenerate(3.0) == 'unconfirmed'
    assert planner.regenerate(4.0) == 'changed'


@settings(max_examples=200, deadline=None)
@given(answers=st.lists(st.sampled_from(['a', 'b', 'c']), min_size=1, max_size=40),
       need=st.integers(1, 4))
def test_the_subtask_changes_only_when_the_last_looks_all_agree(answers, need):
    gen, planner = make(HighLevelConfig(subtask_confirmations=need), subtask=list(answers))
    planner.set_task('t')
    held = ''
    for k, answer in enumerate(answers):
        outcome = planner.regenerate(float(k))
        agreed = k + 1 >= need and all(a == answer for a in answers[k + 1 - need:k + 1])
        if not held:
            assert outcome == 'changed'
        elif answer == held:
            assert outcome == 'repeat'
        else:
            assert outcome == ('changed' if agreed else 'unconfirmed')
        if outcome == 'changed':
            held = answer
        assert planner.state.subtask == held


def test_the_subtask_prompt_quotes_the_observed_joint_state():
    """A template with {joints}: each look renders the joint state of the observation it was
    given (core/prompts.py render_joints); a look without one leaves the line out. The text
    is on the diagnostics (last_prompt.subtask)."""
    import numpy as np

    from lerobot_lang_nodes.core import prompts
    gen = ScriptedGenerator(subtask=['reach the red cube', 'grasp the red cube', 'lift it'])
    templates = prompts.PromptTemplates(subtask='{task}\nJoints: {joints}')
    planner = HighLevelPlanner(gen, LanguageState(), HighLevelConfig(enable_memory=False),
                               templates)
    planner.set_task('put the red cube in the bowl')
    planner.regenerate(0.0, {'joint_names': ['shoulder_pan', 'gripper'],
                             'joint_positions': np.array([0.4, 1.0])})
    planner.regenerate(1.0, {'joint_names': ['shoulder_pan', 'gripper'],
                             'joint_positions': np.array([-0.123, 0.2])})
    planner.regenerate(2.0, {'images': {}})
    prompts_sent = [messages[0]['content'] for kind, messages, _ in gen.calls]
    assert prompts_sent == ['put the red cube in the bowl\nJoints: 1.00 0.40',
                            'put the red cube in the bowl\nJoints: 0.20 -0.12',
                            'put the red cube in the bowl']
    assert planner.stats()['last_prompt.subtask'] == 'put the red cube in the bowl'
