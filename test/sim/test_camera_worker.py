"""CameraWorker: frames drawn on their own thread from a snapshot of the scene (real MuJoCo).

The simulation thread offers the scene's state at a camera tick and goes on stepping; what the
worker delivers must be the scene as it was at the offer, stamped with that instant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from lerobot_lang_nodes.sim.camera_worker import CameraWorker, RenderStopped


class Frames:
    """The worker's deliveries; ``gate`` (when set) holds the worker inside deliver."""

    def __init__(self) -> None:
        self.got: list[tuple[float, dict[str, np.ndarray]]] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail_next: BaseException | None = None

    def __call__(self, stamp: float, images: dict[str, np.ndarray]) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30.0)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        self.got.append((stamp, images))


@pytest.fixture
def worker(sim_scene):
    frames = Frames()
    w = CameraWorker(sim_scene.model, sim_scene.image_size, ('front', 'wrist'), frames,
                     render_stats=sim_scene.stats)
    try:
        yield w, frames
    finally:
        w.close()


def _move_arm(scene) -> None:
    goal = scene.joint_positions()
    goal[0] += 0.6  # shoulder_pan: the wrist camera and the arm in the front view move
    scene.apply_action(goal)
    for _ in range(30):
        scene.step()


def test_frames_show_the_scene_at_the_offer_not_after(sim_scene, worker):
    w, frames = worker
    sim_scene.reset(seed=4)
    before = {cam: sim_scene.render(cam) for cam in ('front', 'wrist')}
    stamp = sim_scene.sim_time
    frames.gate = threading.Event()
    assert w.offer(sim_scene.data, stamp)
    _move_arm(sim_scene)  # the simulation goes on while the frame is drawn
    after = sim_scene.render('wrist')
    frames.gate.set()
    assert w.wait_idle(30.0)
    assert len(frames.got) == 1 and w.stats.frames == 1
    got_stamp, images = frames.got[0]
    assert got_stamp == stamp < sim_scene.sim_time
    for cam, image in images.items():
        assert image.shape == (240, 320, 3) and image.dtype == np.uint8
        # Another GL context, same settings: the same picture of the same state.
        assert np.abs(image.astype(int) - before[cam]).mean() < 1.0, cam
    assert np.abs(images['wrist'].astype(int) - after).mean() > 5.0  # not the later state
    assert sim_scene.stats.render_calls['wrist'] >= 2


def test_a_tick_during_a_frame_is_skipped_and_counted(sim_scene, worker):
    w, frames = worker
    frames.gate = threading.Event()
    assert w.offer(sim_scene.data, 1.0)
    assert frames.entered.wait(30.0)  # drawn, now held inside deliver
    assert not w.offer(sim_scene.data, 2.0)
    assert not w.offer(sim_scene.data, 3.0)
    assert w.stats.skipped == 2
    frames.gate.set()
    assert w.wait_idle(30.0)
    assert [s for s, _ in frames.got] == [1.0]
    assert w.offer(sim_scene.data, 4.0) and w.wait_idle(30.0)  # free again
    assert [s for s, _ in frames.got] == [1.0, 4.0]


def test_a_failed_frame_is_counted_and_the_next_one_comes(sim_scene, worker):
    w, frames = worker
    frames.fail_next = RuntimeError('publisher gone')
    assert w.offer(sim_scene.data, 1.0) and w.wait_idle(30.0)
    assert w.stats.errors == 1 and 'publisher gone' in w.stats.last_error and w.alive
    assert w.offer(sim_scene.data, 2.0) and w.wait_idle(30.0)
    assert [s for s, _ in frames.got] == [2.0] and w.stats.frames == 1


def test_render_stopped_ends_the_worker_and_later_offers_are_refused(sim_scene, worker):
    w, frames = worker
    frames.fail_next = RenderStopped()
    assert w.offer(sim_scene.data, 1.0)
    w.wait_idle(30.0)
    w.close()
    assert not w.alive
    assert not w.offer(sim_scene.data, 2.0)
    assert frames.got == [] and w.stats.errors == 0


def test_close_stops_an_idle_worker(sim_scene):
    w = CameraWorker(sim_scene.model, sim_scene.image_size, ('front',), Frames())
    assert w.alive
    w.close()
    assert not w.alive


# Run in a fresh process: a software renderer (Mesa llvmpipe) starts its threads once per
# process, with the first GL context, and this test must see who started them.
NICE_CHILD = """
import json, os, sys, threading
from lerobot_lang_nodes.sim.scene import So101Scene
from lerobot_lang_nodes.sim.camera_worker import CameraWorker
from lerobot_lang_nodes.testing import thread_stats

def threads():
    return {str(tid): [t['name'], t['nice']] for tid, t in thread_stats(os.getpid()).items()}

scene = So101Scene(image_size=(48, 64), cameras=('front',))
before = threads()
got = []
w = CameraWorker(scene.model, scene.image_size, ('front',), lambda s, im: got.append(s),
                 nice=int(sys.argv[1]))
assert w.offer(scene.data, 1.0) and w.wait_idle(60.0), w.stats
print(json.dumps({'before': before, 'after': threads(), 'worker': w.native_id,
                  'frames': got, 'stats_nice': w.stats.nice,
                  'main': threading.get_native_id()}))
w.close()
"""


@pytest.mark.skipif(not Path('/proc/self/task').is_dir(), reason='platform: needs Linux /proc')
def test_nice_lowers_the_render_thread_and_the_threads_it_starts_only():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    out = subprocess.run([sys.executable, '-c', NICE_CHILD, '7'], capture_output=True,
                         text=True, timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report['frames'] == [1.0]
    want = min(19, base + 7)
    before, after = report['before'], report['after']
    started = {tid: v for tid, v in after.items() if tid not in before}
    assert str(report['worker']) in started
    # The worker and whatever it started (the software renderer's threads) yield the CPU
    # (Mesa's shader-cache thread lowers itself further, to 19) ...
    assert started[str(report['worker'])][1] == want
    assert all(nice >= want for _, nice in started.values()), started
    assert all(nice == want for name, nice in started.values() if name.startswith('llvmpipe'))
    assert report['stats_nice'] == want
    # ... and nothing that was already running changed: the simulation thread keeps its share.
    assert all(after[tid][1] == before[tid][1] == base for tid in before if tid in after)
    assert after[str(report['main'])][1] == base
