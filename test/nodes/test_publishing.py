"""PublishGuard: a write DDS refused costs that output only; silent while ROS shuts down."""

from __future__ import annotations

import pytest
import rclpy

from lerobot_lang_nodes.nodes.publishing import PublishError, PublishGuard


@pytest.fixture
def node():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('publish_guard_test', context=context)
    yield node
    node.destroy_node()
    rclpy.try_shutdown(context=context)


def test_a_refused_write_is_counted_logged_once_per_period_and_the_caller_goes_on(node, capfd):
    counted = []
    guard = PublishGuard(node, 'publish', 'the loop goes on', on_failed=lambda: counted.append(1))
    went_on = 0
    for n in range(3):
        with guard:
            raise PublishError(f'history full {n}')
        went_on += 1
    assert went_on == 3 and guard.count == 3 and len(counted) == 3
    err = capfd.readouterr().err
    assert 'publish failed (1 so far; the loop goes on): history full 0' in err
    assert 'history full 1' not in err  # throttled: a failing loop writes one line a period
    with pytest.raises(ValueError):  # anything else is not a refused write
        with guard:
            raise ValueError('a bug')
    assert guard.count == 3


def test_while_ros_shuts_down_a_refused_write_is_neither_counted_nor_logged(node, capfd):
    guard = PublishGuard(node, 'publish', 'the loop goes on')
    rclpy.shutdown(context=node.context)  # Ctrl-C between a loop's check and its publish
    with guard:
        raise PublishError('context invalid')
    assert not guard.failed(PublishError('late')) and guard.count == 0
    assert 'publish failed' not in capfd.readouterr().err
