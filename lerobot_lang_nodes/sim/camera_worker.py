"""Camera frames rendered off the simulation thread, from snapshots of the scene.

At each camera tick the simulation thread copies MjData (about 40 us for the SO-101 scene) and
hands the copy to this worker, which draws every camera from it on its own thread, with its
own GL context. MuJoCo releases the GIL while it renders, so the control loop keeps its period
while a frame is drawn (6-12 ms per camera in software GL): rendered in the loop, two cameras
outlasted a 50 Hz period. A frame carries the snapshot's sim time, so an image and the joint
state of the same instant still share a stamp.

One snapshot buffer: a tick that comes while the previous frame is still being drawn is
skipped and counted, never queued (a queue would only add latency). The worker thread must be
started from a thread with normal scheduling: the renderer's own threads (software GL) inherit
its policy, and must not compete with a SCHED_FIFO control loop. With ``nice`` > 0 the worker
lowers its own priority before it creates its GL context, so the renderer's threads inherit it
too: frames then yield the CPU to the other nodes (policy inference, planner) on a small host.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from lerobot_lang_nodes.sim.scene import PhysicsStats, make_renderer

# deliver(stamp_s, {camera: image}) runs on the worker thread.
Deliver = Callable[[float, dict[str, np.ndarray]], None]


class RenderStopped(Exception):
    """Raised by a ``deliver`` callback to end the worker (its output is gone for good)."""


@dataclass
class CameraWorkerStats:
    """Counters read by the node's diagnostics (plain ints: atomic under the GIL)."""

    frames: int = 0           # snapshots rendered and delivered
    skipped: int = 0          # camera ticks that came while a frame was still being drawn
    errors: int = 0           # frames lost to an exception in render or deliver
    last_error: str = ''
    nice: int | None = None   # the render thread's nice value once it runs (None: not yet)


class CameraWorker:
    """Renders ``cameras`` of ``model`` from snapshots offered by the simulation thread."""

    def __init__(self, model: mujoco.MjModel, image_size: tuple[int, int],
                 cameras: Sequence[str], deliver: Deliver,
                 render_stats: PhysicsStats | None = None, name: str = 'sim-render',
                 nice: int = 0) -> None:
        self._model = model
        self._image_size = image_size
        self._cameras = tuple(cameras)
        self._deliver = deliver
        self._render_stats = render_stats
        self._nice = int(nice)
        self._snapshot = mujoco.MjData(model)
        self._stamp = 0.0
        self._cond = threading.Condition()
        self._pending = False   # a snapshot is waiting for the worker
        self._busy = False      # the worker is drawing the snapshot: the buffer is its own
        self._running = True
        self.stats = CameraWorkerStats()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def offer(self, data: mujoco.MjData, stamp_s: float) -> bool:
        """Copy ``data`` for the next frame; False (counted) while a frame is being drawn."""
        with self._cond:
            if not self._running:
                return False
            if self._pending or self._busy:
                self.stats.skipped += 1
                return False
            mujoco.mj_copyData(self._snapshot, self._model, data)
            self._stamp = float(stamp_s)
            self._pending = True
            self._cond.notify()
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until the offered snapshot has been delivered (or the worker ended)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    @property
    def native_id(self) -> int | None:
        """The render thread's kernel id (diagnostics, tests)."""
        return self._thread.native_id

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the worker; it frees its GL context on its own thread."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        renderer = None
        self._lower_priority()
        try:
            while True:
                with self._cond:
                    while self._running and not self._pending:
                        self._cond.wait()
                    if not self._running:
                        return
                    self._pending, self._busy = False, True
                    stamp = self._stamp
                try:
                    if renderer is None:  # the GL context is created and used on this thread
                        renderer = make_renderer(self._model, self._image_size)
                    images = {cam: self._render(renderer, cam) for cam in self._cameras}
                    self._deliver(stamp, images)
                    self.stats.frames += 1
                except RenderStopped:
                    return
                except Exception as exc:  # noqa: BLE001 - a lost frame, never a dead camera
                    self.stats.errors += 1
                    self.stats.last_error = f'{type(exc).__name__}: {exc}'
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
        finally:
            with self._cond:
                self._running = False
                self._cond.notify_all()
            if renderer is not None:
                renderer.close()

    def _lower_priority(self) -> None:
        # Linux: PRIO_PROCESS with a thread id sets that thread's nice value alone, and the
        # threads it creates later (the software renderer's) inherit it.
        tid = threading.get_native_id()
        if self._nice > 0 and hasattr(os, 'setpriority'):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid)
                                                        + self._nice))
            except OSError as exc:
                self.stats.last_error = f'nice {self._nice} refused: {exc}'
        if hasattr(os, 'getpriority'):
            self.stats.nice = os.getpriority(os.PRIO_PROCESS, tid)

    def _render(self, renderer: mujoco.Renderer, camera: str) -> np.ndarray:
        start = time.perf_counter()
        renderer.update_scene(self._snapshot, camera=camera)
        image = renderer.render()
        if self._render_stats is not None:
            stats = self._render_stats
            stats.render_wall_s[camera] = (stats.render_wall_s.get(camera, 0.0)
                                           + time.perf_counter() - start)
            stats.render_calls[camera] = stats.render_calls.get(camera, 0) + 1
        return image
