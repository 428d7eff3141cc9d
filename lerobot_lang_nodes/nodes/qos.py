"""Named QoS profiles per topic class (REP-2003), so every node picks the same on purpose."""

from __future__ import annotations

from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)

# Camera images and joint states: best effort, keep last few; a late frame is worth nothing.
SENSOR = qos_profile_sensor_data

# State that a late joiner must get at once (task, language_context, subtask, memory, plan,
# speech): reliable + transient local, depth 1, as REP-2003 suggests for map-like state.
LATCHED = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)

# Commands and events that must not be lost (action_chunk, interjection): reliable, volatile,
# a small queue so a slow executor sees the newest chunks.
COMMAND = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE)

# Periodic status (runtime_status, diagnostics): reliable, keep the latest few.
STATUS = QoSProfile(depth=5, history=HistoryPolicy.KEEP_LAST,
                    reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)

# /clock: the rclpy time source subscribes with best effort-compatible defaults.
CLOCK = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                   reliability=ReliabilityPolicy.BEST_EFFORT,
                   durability=DurabilityPolicy.VOLATILE)

# Services many clients may call at once (/vqa): the default depth of 10 silently drops the
# 11th request queued while the executor's threads are busy; the node refuses what it cannot
# take (busy) instead.
SERVICE_BURST = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST,
                           reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE)
