"""Frame sinks for the viewer: a rolling atomic `latest.png` and a streamed H.264 MP4."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from fractions import Fraction
from pathlib import Path
from typing import Optional, Union

import numpy as np
from PIL import Image

from lerobot_lang_nodes.viewer.compose import as_rgb8

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


class VideoWriterError(RuntimeError):
    """A frame sink cannot be opened or written (bad path, codec missing, closed writer)."""


def pad_even(frame: np.ndarray) -> np.ndarray:
    """Pad ``frame`` with black on the right/bottom to even width and height (yuv420p)."""
    h, w = frame.shape[:2]
    if h % 2 == 0 and w % 2 == 0:
        return frame
    out = np.zeros((h + h % 2, w + w % 2, 3), np.uint8)
    out[:h, :w] = frame
    return out


def write_png_atomic(path: PathLike, frame: np.ndarray, compress_level: int = 1) -> None:
    """Write ``frame`` as PNG so readers only ever see a complete file (temp + os.replace)."""
    path = Path(path)
    img = Image.fromarray(as_rgb8(frame, 'frame'))
    # The temp file lives in the same directory: os.replace is atomic only within a filesystem.
    fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; the PNG is meant to be looked at
        with os.fdopen(fd, 'wb') as f:
            img.save(f, format='PNG', compress_level=compress_level)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class LatestPngWriter:
    """Rewrites one PNG every ``every_n`` submitted frames, atomically."""

    def __init__(self, path: PathLike, every_n: int = 5, *, compress_level: int = 1) -> None:
        if every_n < 1:
            raise VideoWriterError(f'every_n must be >= 1, got {every_n}')
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise VideoWriterError(
                f'directory {self.path.parent} for latest png {self.path.name} does not exist')
        self.every_n = every_n
        self.compress_level = compress_level
        self.frames_seen = 0
        self.frames_written = 0

    def submit(self, frame: np.ndarray) -> bool:
        """Count ``frame``; write every ``every_n``-th one, the first included. True if written."""
        write = self.frames_seen % self.every_n == 0
        self.frames_seen += 1
        if write:
            self.write(frame)
        return write

    def write(self, frame: np.ndarray) -> None:
        """Write ``frame`` now, regardless of the cadence."""
        write_png_atomic(self.path, frame, self.compress_level)
        self.frames_written += 1


class Mp4Writer:
    """Encodes frames one by one into an H.264 (yuv420p) MP4 at a fixed frame rate."""

    def __init__(self, path: PathLike, fps: float = 10.0, *, crf: int = 23,
                 preset: str = 'veryfast', codec: str = 'libx264', threads: int = 1,
                 fragmented: bool = False) -> None:
        if fps <= 0:
            raise VideoWriterError(f'fps must be > 0, got {fps}')
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise VideoWriterError(
                f'directory {self.path.parent} for video {self.path.name} does not exist')
        # A rational rate keeps pts exact (e.g. 29.97 -> 30000/1001).
        self.fps = Fraction(fps).limit_denominator(1001)
        self.crf = crf
        self.preset = preset
        self.codec = codec
        self.threads = threads
        self.fragmented = fragmented
        self.frames_written = 0
        self._lock = threading.Lock()
        self._container = None
        self._stream = None
        self._size: Optional[tuple[int, int]] = None  # (width, height), fixed by frame 1
        self._closed = False
        self._warned_resize = False

    @property
    def size(self) -> Optional[tuple[int, int]]:
        """(width, height) of the video, known after the first frame."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def _open(self, width: int, height: int) -> None:
        import av  # lazy: only recording needs PyAV

        try:
            container = av.open(str(self.path), mode='w', format='mp4',
                                options=({'movflags': 'frag_keyframe+empty_moov'}
                                         if self.fragmented else {}))
        except (OSError, av.FFmpegError) as exc:
            raise VideoWriterError(f'cannot open {self.path} for writing: {exc}') from exc
        try:
            stream = container.add_stream(self.codec, rate=self.fps)
        except (ValueError, av.FFmpegError) as exc:
            container.close()
            raise VideoWriterError(f'codec {self.codec!r} is not available in PyAV: {exc}') \
                from exc
        stream.width, stream.height = width, height
        stream.pix_fmt = 'yuv420p'
        stream.time_base = 1 / self.fps
        # zerolatency: no lookahead or B-frames, so each frame is muxed as it arrives.
        stream.options = {'crf': str(self.crf), 'preset': self.preset, 'tune': 'zerolatency'}
        stream.thread_count = self.threads
        self._container, self._stream, self._size = container, stream, (width, height)
        logger.info('recording %dx%d @ %s fps to %s', width, height, float(self.fps), self.path)

    def write(self, frame: np.ndarray) -> None:
        """Encode one HxWx3 uint8 RGB frame; later sizes are resized to the first one's."""
        import av

        frame = pad_even(as_rgb8(frame, 'frame'))
        with self._lock:
            if self._closed:
                raise VideoWriterError(f'{self.path}: write() after close()')
            if self._container is None:
                self._open(frame.shape[1], frame.shape[0])
            width, height = self._size
            if (frame.shape[1], frame.shape[0]) != (width, height):
                if not self._warned_resize:
                    logger.warning('frame size %dx%d differs from the video %dx%d; resizing',
                                   frame.shape[1], frame.shape[0], width, height)
                    self._warned_resize = True
                frame = np.asarray(Image.fromarray(frame).resize((width, height)))
            vframe = av.VideoFrame.from_ndarray(frame, format='rgb24')
            vframe.pts = self.frames_written
            for packet in self._stream.encode(vframe):
                self._container.mux(packet)
            self.frames_written += 1

    def close(self) -> None:
        """Flush the encoder and finalise the file; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._container is None:
                return  # no frame was ever written; leave no empty file behind
            try:
                for packet in self._stream.encode(None):
                    self._container.mux(packet)
            finally:
                self._container.close()
            logger.info('closed %s after %d frames', self.path, self.frames_written)

    def __enter__(self) -> 'Mp4Writer':
        return self

    def __exit__(self, *exc) -> None:
        self.close()
