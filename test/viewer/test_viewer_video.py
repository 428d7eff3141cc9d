"""Rolling latest.png (atomic) and the streamed H.264 MP4 writer."""

import threading

import av
import numpy as np
import pytest
from PIL import Image

from lerobot_lang_nodes.viewer.video import (LatestPngWriter, Mp4Writer, VideoWriterError,
                                             pad_even, write_png_atomic)


def solid(colour, h=240, w=320):
    return np.full((h, w, 3), colour, np.uint8)


def test_png_written_every_n_frames(tmp_path):
    path = tmp_path / 'latest.png'
    writer = LatestPngWriter(path, every_n=3)
    written = [writer.submit(solid((i * 30, 0, 0))) for i in range(7)]
    assert written == [True, False, False, True, False, False, True]
    assert writer.frames_written == 3
    with Image.open(path) as img:
        assert img.format == 'PNG' and img.size == (320, 240)
        assert np.asarray(img.convert('RGB'))[0, 0].tolist() == [180, 0, 0]  # frame 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ['latest.png']  # no temp files


def test_png_always_readable_while_rewritten(tmp_path):
    path = tmp_path / 'latest.png'
    write_png_atomic(path, solid((0, 0, 0)))
    stop = threading.Event()
    errors, reads = [], [0]

    def reader():
        while not stop.is_set():
            try:
                with Image.open(path) as img:
                    img.load()  # decodes the whole file: a torn write would fail here
                reads[0] += 1
            except Exception as exc:  # noqa: BLE001 - any failure is what we look for
                errors.append(repr(exc))

    thread = threading.Thread(target=reader)
    thread.start()
    rng = np.random.default_rng(0)
    try:
        for _ in range(40):
            write_png_atomic(path, rng.integers(0, 255, (240, 320, 3), np.uint8))
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert reads[0] > 0


def test_failed_png_write_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / 'latest.png'
    write_png_atomic(path, solid((1, 2, 3)))

    def broken_save(self, fp, *args, **kwargs):
        fp.write(b'\x89PNG partial')
        raise OSError('disk full')

    monkeypatch.setattr(Image.Image, 'save', broken_save)
    with pytest.raises(OSError, match='disk full'):
        write_png_atomic(path, solid((9, 9, 9)))
    monkeypatch.undo()
    with Image.open(path) as img:
        assert np.asarray(img)[0, 0].tolist() == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['latest.png']


def test_png_writer_validates(tmp_path):
    with pytest.raises(VideoWriterError, match='every_n'):
        LatestPngWriter(tmp_path / 'x.png', every_n=0)
    with pytest.raises(VideoWriterError, match='does not exist'):
        LatestPngWriter(tmp_path / 'missing' / 'x.png')


def read_video(path):
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format='rgb24') for f in container.decode(stream)]
        return stream.codec_context.name, stream.codec_context.pix_fmt, stream, frames


def test_mp4_round_trip(tmp_path):
    path = tmp_path / 'run.mp4'
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    with Mp4Writer(path, fps=10) as writer:
        for i in range(30):
            writer.write(solid(colours[i // 10]))
            if i == 0:
                assert path.exists()  # streamed: the file is open from the first frame
    assert writer.closed and writer.frames_written == 30
    codec, pix_fmt, stream, frames = read_video(path)
    assert codec == 'h264' and pix_fmt == 'yuv420p'
    assert len(frames) == 30
    assert frames[0].shape == (240, 320, 3)
    assert float(stream.average_rate) == pytest.approx(10.0)
    for i, colour in ((5, colours[0]), (15, colours[1]), (25, colours[2])):
        assert np.abs(frames[i].reshape(-1, 3).mean(axis=0) - colour).max() < 8


def test_mp4_even_dims_resize_and_double_close(tmp_path):
    path = tmp_path / 'odd.mp4'
    writer = Mp4Writer(path, fps=15)
    writer.write(solid((100, 100, 100), h=241, w=321))
    writer.write(solid((100, 100, 100), h=100, w=100))  # later size changes are resized
    assert writer.size == (322, 242)
    writer.close()
    writer.close()
    with pytest.raises(VideoWriterError, match='after close'):
        writer.write(solid((0, 0, 0)))
    _, _, _, frames = read_video(path)
    assert len(frames) == 2 and frames[0].shape == (242, 322, 3)


def test_mp4_without_frames_leaves_no_file(tmp_path):
    writer = Mp4Writer(tmp_path / 'none.mp4')
    writer.close()
    assert not (tmp_path / 'none.mp4').exists()
    with pytest.raises(VideoWriterError, match='fps'):
        Mp4Writer(tmp_path / 'x.mp4', fps=0)


def test_pad_even():
    assert pad_even(np.zeros((3, 5, 3), np.uint8)).shape == (4, 6, 3)
    frame = np.zeros((4, 6, 3), np.uint8)
    assert pad_even(frame) is frame
