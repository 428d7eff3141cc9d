"""Conversions between ROS messages and the core's types (thin: the logic lives in core)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from lerobot_lang_msgs.msg import ActionChunk, RuntimeStatus
from lerobot_lang_nodes.core import images
from lerobot_lang_nodes.core.camera_info import Intrinsics
from lerobot_lang_nodes.core.executor import Chunk, ExecutorStatus


def stamp_to_s(stamp: Any) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def s_to_stamp(seconds: float, stamp: Any) -> Any:
    """Fill a builtin_interfaces/Time in place from seconds and return it."""
    sec = int(np.floor(seconds))
    stamp.sec = sec
    stamp.nanosec = min(int(round((seconds - sec) * 1e9)), 999_999_999)
    return stamp


def image_to_rgb(msg: Image) -> np.ndarray:
    """HxWx3 uint8 RGB from a sensor_msgs/Image; raises images.ImageFormatError."""
    return images.to_rgb(msg.encoding, msg.height, msg.width, msg.step, msg.data)


def rgb_to_image(rgb: np.ndarray, stamp_s: float, frame_id: str) -> Image:
    h, w, step, data = images.from_rgb(rgb)
    msg = Image(height=h, width=w, encoding='rgb8', is_bigendian=0, step=step, data=data)
    s_to_stamp(stamp_s, msg.header.stamp)
    msg.header.frame_id = frame_id
    return msg


def intrinsics_to_camera_info(intr: Intrinsics, stamp_s: float, frame_id: str) -> CameraInfo:
    """sensor_msgs/CameraInfo of a camera's intrinsics (the pinhole math is core.camera_info's)."""
    msg = CameraInfo(height=intr.height, width=intr.width,
                     distortion_model=intr.distortion_model, d=list(intr.d), k=list(intr.k),
                     r=list(intr.r), p=list(intr.p))
    s_to_stamp(stamp_s, msg.header.stamp)
    msg.header.frame_id = frame_id
    return msg


# image_transport's compressed format: the raw encoding; the JPEG reads as bgr8 in OpenCV.
JPEG_FORMAT = 'rgb8; jpeg compressed bgr8'


def rgb_to_compressed(rgb: np.ndarray, stamp_s: float, frame_id: str,
                      quality: int = 85) -> CompressedImage:
    """A sensor_msgs/CompressedImage (JPEG) of an RGB frame, for ``<image topic>/compressed``."""
    msg = CompressedImage(format=JPEG_FORMAT, data=images.encode_jpeg(rgb, quality))
    s_to_stamp(stamp_s, msg.header.stamp)
    msg.header.frame_id = frame_id
    return msg


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """HxWx3 uint8 RGB from a CompressedImage (JPEG or PNG); raises images.ImageFormatError."""
    return images.decode_compressed(msg.data)


def chunk_from_msg(msg: ActionChunk) -> Chunk:
    """Core Chunk from a message; raises core InvalidChunk when sizes disagree."""
    return Chunk.from_flat(np.asarray(msg.values, dtype=np.float64), int(msg.horizon),
                           int(msg.action_dim), action_names=tuple(msg.action_names),
                           revision=int(msg.context_revision), sequence=int(msg.sequence),
                           stamp_s=stamp_to_s(msg.header.stamp),
                           period_s=float(msg.control_period_s),
                           instruction=msg.instruction, backend=msg.backend,
                           # 0 = a producer that does not set it: every revision flushes
                           flush_revision=int(msg.flush_revision) or None)


def chunk_to_msg(values: np.ndarray, action_names: tuple[str, ...], *, revision: int,
                 sequence: int, stamp_s: float, period_s: float, instruction: str,
                 backend: str, flush_revision: int = 0) -> ActionChunk:
    values = np.asarray(values, dtype=np.float64)
    msg = ActionChunk(context_revision=int(revision), flush_revision=int(flush_revision),
                      instruction=instruction,
                      action_names=list(action_names), horizon=int(values.shape[0]),
                      action_dim=int(values.shape[1]), values=values.ravel().tolist(),
                      control_period_s=float(period_s), sequence=int(sequence), backend=backend)
    s_to_stamp(stamp_s, msg.header.stamp)
    return msg


def status_to_msg(status: ExecutorStatus, stamp_s: float) -> RuntimeStatus:
    msg = RuntimeStatus(
        mode=status.mode, queue_depth=int(status.queue_depth),
        needs_refill=bool(status.needs_refill), context_revision=int(status.context_revision),
        flush_revision=int(status.flush_revision),
        control_period_s=float(status.control_period_s),
        last_chunk_sequence=max(0, int(status.last_chunk_sequence)),
        last_chunk_revision=max(0, int(status.last_chunk_revision)),
        last_accepted_sequence=max(0, int(status.last_accepted_sequence)),
        dispatched=int(status.dispatched),
        discarded_stale=int(status.discarded_stale),
        rejected_invalid=int(status.rejected_invalid), starved_ticks=int(status.starved_ticks),
        active_instruction=status.active_instruction,
        last_reject_reason=status.last_reject_reason, dry_run=bool(status.dry_run),
        planned=int(status.planned), planned_target=list(status.planned_target),
        control_source=status.control_source)
    s_to_stamp(stamp_s, msg.header.stamp)
    return msg
