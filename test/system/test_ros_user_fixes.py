"""What a ROS user does with plain topics and params files, under a namespace, over DDS.

The sim bridge and the planner run under /robot1 from the params file the launch files
generate; the test then drives them as `ros2 topic pub` / `ros2 service call` would.
"""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from rcl_interfaces.srv import GetParameters
from sensor_msgs.msg import Image
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger

from lerobot_lang_msgs.msg import LanguageContext, RuntimeStatus
from lerobot_lang_msgs.srv import AskVqa
from lerobot_lang_nodes import graph
from lerobot_lang_nodes.nodes import qos
from lerobot_lang_nodes.testing import wait_until

pytestmark = pytest.mark.slow
NS = '/robot1'
FIRST_TASK = 'put the red cube in the bowl'


def _start(launch_node, plan: graph.LaunchPlan, name: str):
    spec = next(s for s in plan.specs if s.name == name)
    return launch_node(spec.module, '-r', f'__ns:={NS}', '-r', f'__node:={name}',
                       '--params-file', str(plan.params_file), name=name)


def test_topics_services_and_params_under_a_namespace(launch_node, probe):
    plan = graph.launch_plan('sim', {'namespace': NS, 'task': FIRST_TASK, 'viewer': 'false'})
    procs = [_start(launch_node, plan, name) for name in ('sim_bridge', 'planner')]
    context = probe.subscribe(LanguageContext, f'{NS}/language_context', qos.LATCHED)
    status = probe.subscribe(RuntimeStatus, f'{NS}/runtime_status', qos.STATUS)
    vqa_log = probe.subscribe(String, f'{NS}/vqa_log', qos.COMMAND)
    images = probe.subscribe(Image, f'{NS}/cameras/wrist/image_raw', qos.SENSOR)
    for name in ('sim_bridge', 'planner'):
        probe.wait_for_node(name, timeout_s=60.0, processes=procs)
    probe.wait_for_publisher(f'{NS}/runtime_status', timeout_s=60.0, processes=procs)
    # The launch argument task:=... reached the namespaced planner through the params file.
    context.wait_for(lambda m: m.task == FIRST_TASK and m.subtask, timeout_s=60.0,
                     what='the task given as a launch argument')
    reply = probe.call(GetParameters, f'{NS}/planner/get_parameters',
                       GetParameters.Request(names=['use_sim_time']))
    assert reply.values[0].bool_value is True

    # `ros2 topic pub --once` with default QoS: a volatile publisher, sent once it matched.
    volatile = probe.publisher(String, f'{NS}/task', qos.COMMAND, wait_subscribers=1)
    volatile.publish(String(data='pick up the blue cube'))
    context.wait_for(lambda m: m.task == 'pick up the blue cube', what='volatile /task')
    # A latched publisher (the project's own, or `--qos-durability transient_local`).
    latched = probe.publisher(String, f'{NS}/task', qos.LATCHED, wait_subscribers=2)
    latched.publish(String(data='pick up the green cube'))
    ctx = context.wait_for(lambda m: m.task == 'pick up the green cube', what='latched /task')
    revision = ctx.revision
    # The latched sample reached both of the planner's /task subscriptions and was taken once.
    assert procs[1].log_text().count("task: 'pick up the green cube'") == 1

    # `direct:` sets the active subtask and keeps the task.
    volatile.publish(String(data='direct: open the gripper'))
    ctx = context.wait_for(lambda m: m.subtask == 'open the gripper', what='direct subtask')
    assert ctx.task == 'pick up the green cube' and ctx.revision > revision

    # Each VQA exchange is also published on vqa_log, so a bag holds it.
    images.wait_for(what='a wrist camera image')
    request = AskVqa.Request(question='what is in the gripper?', camera='wrist')

    def asked():  # the planner's first wrist frame may trail the probe's by a frame
        reply = probe.call(AskVqa, f'{NS}/vqa', request, timeout_s=60.0)
        return None if reply.message.startswith('no image received yet') else reply

    answer = wait_until(asked, 10.0, 'a VQA answer', procs)
    assert answer.success, answer.message
    logged = json.loads(vqa_log.wait_for(what='the VQA exchange on vqa_log').data)
    assert logged['question'] == 'what is in the gripper?' and logged['camera'] == 'wrist'
    assert logged['answer'] == answer.answer and logged['success'] is True

    # The executor's timed burst: act for 0.5 s of sim time, then pause by itself.
    status.wait_for(lambda m: m.mode == 'paused', what='paused by the question',
                    since=len(status))
    burst = probe.publisher(Float64, f'{NS}/burst', qos.COMMAND, wait_subscribers=1)
    seen = len(status)
    burst.publish(Float64(data=0.5))
    status.wait_for(lambda m: m.mode == 'action', what='action mode during the burst',
                    since=seen)
    status.wait_for(lambda m: m.mode == 'paused', what='paused again after the burst',
                    since=len(status))

    # After /sim/reset the finished task and its memory are gone; nothing re-runs.
    seen = len(context)
    reply = probe.call(Trigger, f'{NS}/sim/reset', Trigger.Request(), timeout_s=30.0)
    assert reply.success, reply.message
    ctx = context.wait_for(lambda m: not m.task, what='the task cleared by the reset',
                           since=seen)
    assert (ctx.subtask, ctx.memory, ctx.plan) == ('', '', '')
    assert 'task and memory cleared' in procs[1].log_text()


def test_viewer_takes_the_next_port_when_its_port_is_taken(launch_node):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        viewer = launch_node('lerobot_lang_nodes.nodes.viewer_node',
                             params={'port': port, 'port_attempts': 20})
        wait_until(lambda: 'is taken; the live view uses port' in viewer.log_text(), 20.0,
                   'the viewer moving to another port', [viewer])
        used = int(viewer.log_text().split('the live view uses port ')[1].split()[0])
        assert port < used < port + 20
        with urllib.request.urlopen(f'http://127.0.0.1:{used}/healthz', timeout=5) as resp:
            assert resp.status == 200
        assert viewer.alive


def test_viewer_without_a_free_port_says_how_to_fix_it(launch_node):
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        viewer = launch_node('lerobot_lang_nodes.nodes.viewer_node',
                             params={'port': port, 'port_attempts': 1})
        wait_until(lambda: not viewer.alive, 20.0, 'the viewer to exit')
        assert 'viewer_port' in viewer.log_text() and str(port) in viewer.log_text()
