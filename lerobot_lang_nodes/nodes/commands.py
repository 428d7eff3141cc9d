"""Operator command topics (/task, /interjection): both kinds of publisher, each sample once.

`ros2 topic pub --once` waits for one matching subscription, publishes once and exits 0.1 s
later. With other subscribers on the topic (the recorder, the simulator) the one that matched
first may not be the planner, and a volatile sample is gone before the planner matches. A
transient-local publisher keeps its sample for whoever matches while it lives, so the
documented form is the latched one; the volatile form (default QoS) is still accepted.

So a command topic gets two subscriptions: a transient-local one (gets a latched sample sent
before this node matched or started) and a volatile one (matches a default-QoS publisher).
A latched sample reaches both and is taken once, keyed by publisher, sequence number and
source time. A default-QoS publisher is incompatible with the transient-local subscription
by design: that pairing is not reported (rclpy's default callback warns on every publish
from ros2cli); any other incompatibility is.
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.qos import QoSPolicyKind, qos_policy_name_from_kind

from lerobot_lang_nodes.nodes import qos

SEEN_KEYS = 64  # the latched samples of this many recent publishers are recognised


def sample_key(info: Any) -> str:
    """Publisher, sequence number and source time of a sample, as one string (it survives a
    state file, so a restarted node does not take a still-latched sample as new)."""
    info = info if isinstance(info, dict) else {}
    gid = info.get('publisher_gid') or {}
    gid_text = bytes(gid.get('data', b'')).hex() if isinstance(gid, dict) else repr(gid)
    return (f"{gid_text}:{info.get('publication_sequence_number')}:"
            f"{info.get('source_timestamp')}")


def sent_ns(info: Any) -> int | None:
    """A sample's DDS source timestamp (wall clock, ns); None where the RMW gives none."""
    stamp = info.get('source_timestamp') if isinstance(info, dict) else None
    return int(stamp) if stamp else None


class CommandSubscription:
    """Two subscriptions on ``topic``; ``callback(msg, sent_ns)`` once per sample.

    ``depth`` overrides the queue depth of both (a recorder must not lose a burst).
    """

    def __init__(self, node: Any, msg_type: Any, topic: str,
                 callback: Callable[[Any, int | None], None], depth: int | None = None,
                 **kwargs: Any) -> None:
        self._node = node
        self._topic = topic
        self._callback = callback
        self._lock = threading.Lock()
        self._seen: collections.deque[str] = collections.deque(maxlen=SEEN_KEYS)
        latched_events = SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible)
        latched, volatile = (copy.copy(qos.LATCHED), copy.copy(qos.COMMAND))
        if depth is not None:
            latched.depth = volatile.depth = depth
        self.subscriptions = [
            node.create_subscription(msg_type, topic, self._on_sample, latched,
                                     event_callbacks=latched_events, **kwargs),
            node.create_subscription(msg_type, topic, self._on_sample, volatile, **kwargs)]

    def _on_sample(self, msg: Any, info: Any) -> None:
        key = sample_key(info)
        with self._lock:
            if key in self._seen:
                return
            self._seen.append(key)
        self._callback(msg, sent_ns(info))

    def _on_incompatible(self, event: Any) -> None:
        if event.last_policy_kind == QoSPolicyKind.DURABILITY:
            return  # a default-QoS (volatile) publisher: the volatile subscription takes it
        self._node.get_logger().warning(
            f'a publisher on {self._node.resolve_topic_name(self._topic)} offers QoS neither '
            f'subscription accepts ({qos_policy_name_from_kind(event.last_policy_kind)}); '
            'publish reliable, e.g. `ros2 topic pub --qos-reliability reliable ...`',
            throttle_duration_sec=10.0)

    def destroy(self) -> None:
        for sub in self.subscriptions:
            self._node.destroy_subscription(sub)
        self.subscriptions = []

    def seen(self) -> list[str]:
        with self._lock:
            return list(self._seen)

    def remember(self, keys: Iterable[str]) -> None:
        """Samples already taken (a restarted node's state file)."""
        with self._lock:
            self._seen.extend(str(k) for k in keys)
