"""MJPEG server over loopback: page, placeholder then frames, slow and vanishing clients."""

import json
import socket
import struct
import threading
import time

import numpy as np
import pytest

from lerobot_lang_nodes.viewer.client import (MjpegStreamReader, decode_jpeg, fetch,
                                              read_multipart_part)
from lerobot_lang_nodes.testing import wait_until
from lerobot_lang_nodes.viewer.mjpeg import BOUNDARY, MjpegServer, MjpegServerError

HOST = '127.0.0.1'


def solid(colour, h=240, w=320):
    return np.full((h, w, 3), colour, np.uint8)


def close_to(frame, colour, tol=20):
    return bool(np.abs(frame.reshape(-1, 3).mean(axis=0) - colour).max() < tol)


@pytest.fixture
def server():
    srv = MjpegServer(HOST, 0).start()
    yield srv
    srv.stop()


def test_binds_loopback_ephemeral_port_and_serves_page(server):
    assert server.host == HOST and server.port > 0
    assert server.url == f'http://{HOST}:{server.port}/'
    status, headers, body = fetch(HOST, server.port, '/')
    assert status == 200 and headers['content-type'].startswith('text/html')
    page = body.decode()
    assert '<img id="view" src="/stream"' in page and 'id="status"' in page
    assert 'waiting for cameras' in page
    status, _, body = fetch(HOST, server.port, '/healthz')
    health = json.loads(body)
    assert status == 200 and health['ok'] and not health['has_frame']
    assert fetch(HOST, server.port, '/nope')[0] == 404


def test_stream_placeholder_then_published_frame(server):
    with MjpegStreamReader(HOST, server.port, timeout=5) as reader:
        headers, first = reader.read_frame()
        assert headers['content-type'] == 'image/jpeg' and headers['x-frame-seq'] == '0'
        assert first.shape == (360, 640, 3)
        assert first.mean() < 60  # dark placeholder with light "waiting for cameras..." text
        assert first.std() > 2
        server.publish(solid((220, 30, 30)))
        frame = reader.wait_for(lambda f: close_to(f, (220, 30, 30)), timeout=5)
        assert frame is not None and frame.shape == (240, 320, 3)
        server.publish(solid((30, 200, 40)))
        assert reader.wait_for(lambda f: close_to(f, (30, 200, 40)), timeout=5) is not None
        wait_until(lambda: server.clients == 1, 2, 'one stream client')
    status, headers, body = fetch(HOST, server.port, '/latest.jpg')
    assert status == 200 and headers['content-type'] == 'image/jpeg'
    assert close_to(decode_jpeg(body), (30, 200, 40))
    health = json.loads(fetch(HOST, server.port, '/healthz')[2])
    assert health['has_frame'] and health['frames'] == 2


def open_raw_stream(port, rcvbuf=None):
    """A /stream client on a raw socket (optionally tiny receive buffer); returns sock, fp."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect((HOST, port))
    sock.sendall(b'GET /stream HTTP/1.0\r\n\r\n')
    fp = sock.makefile('rb')
    while fp.readline() not in (b'\r\n', b''):  # response status line and headers
        pass
    return sock, fp


def test_slow_reader_skips_to_latest_frame_no_queueing(server):
    sock, fp = open_raw_stream(server.port, rcvbuf=8192)
    try:
        assert read_multipart_part(fp, BOUNDARY)[0]['x-frame-seq'] == '0'  # placeholder
        rng = np.random.default_rng(2)
        # A burst of incompressible frames while the client is not reading.
        for _ in range(40):
            server.publish(rng.integers(0, 255, (240, 320, 3), np.uint8))
        last = server.publish(solid((0, 0, 230)))
        seqs = []
        while True:
            headers, body = read_multipart_part(fp, BOUNDARY)
            seqs.append(int(headers['x-frame-seq']))
            if seqs[-1] == last:
                break
        # Only the few frames already in flight are stale; the rest were skipped.
        assert len(seqs) <= 6, f'received frames {seqs}, expected the server to skip ahead'
        assert close_to(decode_jpeg(body), (0, 0, 230))
    finally:
        fp.close()
        sock.close()


def test_several_clients_get_the_frame(server):
    readers = [MjpegStreamReader(HOST, server.port, timeout=5) for _ in range(3)]
    try:
        for r in readers:
            r.read_frame()
        server.publish(solid((240, 240, 0)))
        for r in readers:
            assert r.wait_for(lambda f: close_to(f, (240, 240, 0)), timeout=5) is not None
    finally:
        for r in readers:
            r.close()


def test_stalled_client_does_not_block_others_or_shutdown():
    srv = MjpegServer(HOST, 0).start()
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills after one part
    stalled.connect((HOST, srv.port))
    stalled.sendall(b'GET /stream HTTP/1.0\r\n\r\n')  # and never read from it
    try:
        wait_until(lambda: srv.clients == 1, 5, 'the stalled client to be streaming')
        rng = np.random.default_rng(1)
        worst = 0.0
        for _ in range(20):  # incompressible frames, far more than the socket buffers hold
            t0 = time.perf_counter()
            srv.publish(rng.integers(0, 255, (480, 640, 3), np.uint8))
            worst = max(worst, time.perf_counter() - t0)
        # Blocking on the stalled client would take its 10 s send timeout; a shared CI core
        # can still stall any thread for a fraction of a second.
        assert worst < 1.0, f'publish() blocked for {worst:.3f} s'
        with MjpegStreamReader(HOST, srv.port, timeout=5) as reader:
            srv.publish(solid((0, 220, 220)))
            assert reader.wait_for(lambda f: close_to(f, (0, 220, 220)), timeout=5) is not None
    finally:
        t0 = time.monotonic()
        srv.stop()
        stop_s = time.monotonic() - t0
        stalled.close()
    assert stop_s < 3.0, f'stop() took {stop_s:.2f} s with a stalled client'
    assert not [t for t in threading.enumerate() if t.name.startswith('mjpeg-')]


def test_disconnecting_clients_are_dropped_and_server_keeps_serving(server):
    for abortive in (False, True, True):
        sock, fp = open_raw_stream(server.port)
        read_multipart_part(fp, BOUNDARY)
        if abortive:  # SO_LINGER 0: close with a RST, the harshest way to leave
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        fp.close()
        sock.close()
    for i in range(5):
        server.publish(solid((10 * i, 100, 100)))
    wait_until(lambda: server.clients == 0, 5, 'vanished clients to be dropped')
    with MjpegStreamReader(HOST, server.port, timeout=5) as reader:
        server.publish(solid((250, 250, 250)))
        assert reader.wait_for(lambda f: close_to(f, (250, 250, 250)), timeout=5) is not None


def test_port_in_use_and_idempotent_stop(server):
    with pytest.raises(MjpegServerError, match='cannot bind'):
        MjpegServer(HOST, server.port).start()
    with pytest.raises(MjpegServerError, match='not started'):
        _ = MjpegServer(HOST, 0).port
    server.stop()
    server.stop()
    with pytest.raises(OSError):
        fetch(HOST, server.port, '/', timeout=1)


def test_publish_jpeg_passthrough(server):
    from lerobot_lang_nodes.viewer.mjpeg import encode_jpeg
    server.publish_jpeg(encode_jpeg(solid((0, 0, 250))))
    assert close_to(decode_jpeg(fetch(HOST, server.port, '/latest.jpg')[2]), (0, 0, 250))
    with pytest.raises(MjpegServerError, match='JPEG'):
        server.publish_jpeg(b'not a jpeg')
