"""The README's `ros2 topic pub --once` forms for /task and /interjection, with the recorder on.

`ros2 topic pub --once` publishes as soon as one subscription matched and exits 0.1 s later.
With the recorder (and the simulator, on /task) subscribed too, that one is often not the
planner's, and a volatile sample is gone before the planner matches: interjections reached the
planner 3 times out of 7. The documented form is latched and kept alive a while
(`--keep-alive 5 --qos-durability transient_local --qos-reliability reliable`): whoever matches
meanwhile gets the sample. Each publish here is a new participant that behaves as ros2cli does
(`topic_pub_once`), the recorder already records the topic, and every command must reach the
planner and the bag, once each, with no QoS warning in any node's log.
"""

from __future__ import annotations

import pytest
from std_msgs.msg import String

from lerobot_lang_msgs.msg import LanguageContext
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import topic_pub_once, wait_until

pytestmark = pytest.mark.slow
FIRST_TASK = 'put the red cube in the bowl'
INTERJECTIONS = [f'use the {colour} cube instead'
                 for colour in ('blue', 'green', 'red', 'blue', 'green', 'red', 'blue')]
KEEP_ALIVE_S = 5.0  # the README's --keep-alive


def test_commands_reach_the_planner_and_the_bag_with_the_recorder_running(
        launch_node, probe, tmp_path):
    plan = graph.launch_plan('sim', {'viewer': 'false', 'task': FIRST_TASK})
    specs = {s.name: s for s in plan.specs}
    procs = {name: launch_node(specs[name].module, '-r', f'__node:={name}', '--params-file',
                               str(plan.params_file), name=name)
             for name in ('sim_bridge', 'planner')}
    bags = tmp_path / 'bags'
    procs['recorder'] = launch_node(
        'lerobot_lang_nodes.nodes.recorder_node', '-p', 'use_sim_time:=true',
        '-p', f'output_dir:={bags}', '-p', 'discovery_period_s:=0.1',
        '-p', 'flush_period_s:=0.2',
        # The commands only: a recorder also writing both camera streams on a loaded 2-core
        # machine matched a new publisher only after the keep-alive (a limit the README
        # states), and this test is about what reaches the planner and the bag, not load.
        '-p', 'topics:=[task,interjection]', '-p', 'cameras:=[none]', name='recorder')
    context = probe.subscribe(LanguageContext, 'language_context', qos.LATCHED)
    for name in procs:
        probe.wait_for_node(name, timeout_s=60.0, processes=list(procs.values()))
    context.wait_for(lambda m: m.task == FIRST_TASK and m.subtask, timeout_s=60.0,
                     what='the first task')
    # The recorder subscribes a topic once it has a publisher: let it subscribe to both
    # command topics first, as in a session where they were used before.
    keep = [probe.publisher(String, topic, qos.COMMAND) for topic in ('interjection', 'task')]
    recorder = procs['recorder']
    for topic in ('/interjection', '/task'):
        wait_until(lambda t=topic: f'recording {t} ' in recorder.log_text(), 30.0,
                   f'the recorder to record {topic}', list(procs.values()))
    planner = procs['planner']

    # The README's form: --qos-durability transient_local --qos-reliability reliable.
    for i, text in enumerate(INTERJECTIONS):
        before = planner.log_text().count(f'interjection {text!r} ->')
        topic_pub_once(String, 'interjection', String(data=text), qos.LATCHED, KEEP_ALIVE_S)
        wait_until(lambda text=text, before=before:
                   planner.log_text().count(f'interjection {text!r} ->') > before, 30.0,
                   f'interjection {i + 1} of {len(INTERJECTIONS)} ({text!r}) to reach the '
                   'planner', list(procs.values()))
    # /task: the README's form, then the default-QoS one (`-w 3`: it reaches the planner
    # only if sent once the planner matched) that must not make any node warn.
    tasks = ['put the green cube in the bowl', 'put the blue cube in the bowl']
    topic_pub_once(String, 'task', String(data=tasks[0]), qos.LATCHED, KEEP_ALIVE_S)
    context.wait_for(lambda m: m.task == tasks[0], timeout_s=30.0, since=len(context) - 1,
                     what='the latched /task form')
    default_qos = probe.publisher(String, 'task', qos.COMMAND, wait_subscribers=3)
    default_qos.publish(String(data=tasks[1]))
    context.wait_for(lambda m: m.task == tasks[1], timeout_s=30.0, since=len(context) - 1,
                     what='the default-QoS /task form')
    for name, proc in procs.items():
        assert 'incompatible QoS' not in proc.log_text(), (name, proc.log_text(3000))

    expected = {'/interjection': INTERJECTIONS, '/task': tasks}
    # Everything reached the bag (read while it is written, up to its last flush) ...
    wait_until(lambda: _commands_in_bag(bags) == expected, 30.0,
               'every command in the bag, once each', list(procs.values()))
    del keep
    # ... and a clean stop keeps it so.
    assert recorder.stop() == 0, recorder.log_text(3000)
    assert _commands_in_bag(bags) == expected


def _commands_in_bag(bags) -> dict[str, list[str]] | None:
    from lerobot_lang_nodes.recording.bag_reader import BagError, BagSet
    (bag,) = [p for p in bags.iterdir() if p.is_dir()]
    got: dict[str, list[str]] = {'/interjection': [], '/task': []}
    try:
        with BagSet([bag]) as reader:
            for _t, topic, msgtype, raw in reader.messages(list(got)):
                got[topic].append(reader.decode(raw, msgtype).data)
    except BagError:  # not even its header flushed yet
        return None
    return got
