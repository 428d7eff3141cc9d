"""The nodes' executor: default-group callbacks on the spinning thread, explicit groups pooled."""

from __future__ import annotations

import threading

import pytest

from lerobot_lang_nodes.nodes.runner import DefaultGroupInlineExecutor
from lerobot_lang_nodes.testing import wait_until


@pytest.fixture
def spun_node():
    """A node in its own context, spun by DefaultGroupInlineExecutor on a 'spinner' thread."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('executor_test', context=context)
    executor = DefaultGroupInlineExecutor(num_threads=2, context=context)
    executor.add_node(node)
    errors: list[BaseException] = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            try:
                executor.spin_once(timeout_sec=0.05)
            except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
                errors.append(exc)

    thread = threading.Thread(target=spin, name='spinner', daemon=True)
    yield node, thread, errors
    stop.set()
    if thread.is_alive():
        thread.join(timeout=5.0)
    executor.shutdown(timeout_sec=1.0)
    node.destroy_node()
    rclpy.try_shutdown(context=context)


def test_default_group_callbacks_run_on_the_spinning_thread(spun_node):
    node, thread, _ = spun_node
    ran_on: list[str] = []
    node.create_timer(0.01, lambda: ran_on.append(threading.current_thread().name))
    thread.start()
    wait_until(lambda: len(ran_on) >= 3, 10.0, 'three timer callbacks')
    assert set(ran_on) == {'spinner'}


def test_a_callback_blocking_in_its_own_group_holds_up_nothing_else(spun_node):
    from rclpy.callback_groups import ReentrantCallbackGroup
    node, thread, _ = spun_node
    released = threading.Event()
    blocked_on: list[str] = []
    default_ticks: list[int] = []

    def blocking() -> None:  # a VQA answer or a RunTask: waits for the rest of the node
        blocked_on.append(threading.current_thread().name)
        released.wait(10.0)

    def default_tick() -> None:
        default_ticks.append(1)
        if len(default_ticks) >= 5:
            released.set()

    slow = node.create_timer(0.01, blocking, callback_group=ReentrantCallbackGroup())
    thread.start()
    wait_until(lambda: blocked_on, 10.0, 'the blocking callback to start')
    slow.cancel()
    node.create_timer(0.01, default_tick)
    # Inline on the spinner, the blocked callback would stop the default group for 10 s.
    assert released.wait(5.0), f'default group ran {len(default_ticks)} times meanwhile'
    assert blocked_on[0] != 'spinner'


def test_a_raising_default_group_callback_surfaces_from_spin_once(spun_node):
    node, thread, errors = spun_node
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError('a bug in a callback')

    node.create_timer(0.01, tick)
    thread.start()
    wait_until(lambda: len(calls) >= 4, 10.0, 'the timer to go on after raising')
    assert [str(e) for e in errors] == ['a bug in a callback']
