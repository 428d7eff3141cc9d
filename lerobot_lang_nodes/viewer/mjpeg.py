"""Threaded MJPEG HTTP server: page `/`, stream `/stream`, `/latest.jpg` and `/healthz`."""

from __future__ import annotations

import html
import io
import json
import logging
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw

from lerobot_lang_nodes.viewer.compose import as_rgb8, load_font

logger = logging.getLogger(__name__)

BOUNDARY = 'lerobotframe'
PLACEHOLDER_TEXT = 'waiting for cameras...'
# Disconnected clients must be noticed without new frames, so idle streams resend the frame.
_KEEPALIVE_S = 1.0
# A client that accepts no bytes for this long is dropped instead of holding its thread forever.
_CLIENT_SEND_TIMEOUT_S = 10.0
# A small kernel send buffer per stream, so a slow reader waits on a few frames in flight
# rather than seconds of stale ones: the server then skips to the newest frame.
_STREAM_SNDBUF = 128 * 1024
# Broken pipes, resets and socket timeouts are all OSErrors: the client is gone either way.
_CLIENT_GONE = OSError


class MjpegServerError(RuntimeError):
    """The MJPEG server cannot start (e.g. the address is in use) or is used wrongly."""


def encode_jpeg(frame: np.ndarray, quality: int = 80) -> bytes:
    """Encode an HxWx3 uint8 RGB frame as baseline JPEG bytes."""
    buf = io.BytesIO()
    Image.fromarray(as_rgb8(frame, 'frame')).save(buf, format='JPEG', quality=quality)
    return buf.getvalue()


def placeholder_jpeg(width: int = 640, height: int = 360, text: str = PLACEHOLDER_TEXT,
                     quality: int = 80) -> bytes:
    """A dark JPEG frame with ``text`` centred, served until the first real frame."""
    img = Image.new('RGB', (width, height), (24, 24, 28))
    draw = ImageDraw.Draw(img)
    font = load_font(max(12, height // 14))
    _, _, tw, th = font.getbbox(text)
    draw.text(((width - tw) / 2, (height - th) / 2), text, fill=(200, 200, 200), font=font)
    buf = io.BytesIO()
    img.save(buf, format='JPEG', quality=quality)
    return buf.getvalue()


class _FrameHub:
    """Holds only the newest frame; readers wait for a newer sequence number, never queue."""

    def __init__(self, placeholder: bytes, quality: int) -> None:
        self._cond = threading.Condition()
        self._quality = quality
        self._seq = 0  # 0 is the placeholder
        self._frame: Optional[np.ndarray] = None
        self._jpeg = placeholder
        self._jpeg_seq = 0
        self._encode_lock = threading.Lock()
        self._closed = False
        self.last_publish_monotonic: Optional[float] = None

    def publish(self, frame: Optional[np.ndarray], jpeg: Optional[bytes]) -> int:
        with self._cond:
            self._seq += 1
            self._frame = frame
            if jpeg is not None:
                self._jpeg, self._jpeg_seq = jpeg, self._seq
            self.last_publish_monotonic = time.monotonic()
            self._cond.notify_all()
            return self._seq

    @property
    def seq(self) -> int:
        with self._cond:
            return self._seq

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_newer(self, last_seq: int, timeout: float) -> tuple[int, Optional[bytes]]:
        """Return (seq, jpeg) once seq > last_seq or after ``timeout``; jpeg None if closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._seq > last_seq, timeout)
            if self._closed:
                return self._seq, None
        return self.latest()

    def latest(self) -> tuple[int, bytes]:
        # Encode lazily and once per frame, so an unwatched stream costs no JPEG encoding and
        # many watchers share one encode.
        with self._encode_lock:
            with self._cond:
                seq, frame, jpeg, jpeg_seq = self._seq, self._frame, self._jpeg, self._jpeg_seq
            if jpeg_seq != seq and frame is not None:
                jpeg = encode_jpeg(frame, self._quality)
                with self._cond:
                    if self._jpeg_seq < seq:
                        self._jpeg, self._jpeg_seq = jpeg, seq
            return seq, jpeg


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ margin: 0; background: #111; color: #ddd; font: 14px sans-serif; }}
header {{ padding: 6px 10px; font-weight: bold; }}
#view {{ display: block; max-width: 100%; margin: 0 auto; background: #222; }}
#status {{ padding: 6px 10px; color: #9c9; font-family: monospace; }}
</style></head>
<body><header>{title}</header>
<img id="view" src="/stream" alt="live view">
<div id="status">{status}</div>
<script>
async function poll() {{
  try {{
    const r = await fetch('/healthz', {{cache: 'no-store'}});
    const h = await r.json();
    const age = h.last_frame_age_s === null ? 'none' : h.last_frame_age_s.toFixed(1) + ' s ago';
    document.getElementById('status').textContent =
      (h.has_frame ? 'live' : 'waiting for cameras') + ' | frames ' + h.frames +
      ' | last frame ' + age + ' | clients ' + h.clients + (h.status ? ' | ' + h.status : '');
  }} catch (e) {{
    document.getElementById('status').textContent = 'viewer unreachable';
  }}
}}
setInterval(poll, 1000);
</script>
</body></html>
"""


class _Handler(BaseHTTPRequestHandler):
    server: '_HttpServer'
    timeout = _CLIENT_SEND_TIMEOUT_S  # socket timeout: bounds a blocked send to a stuck client
    server_version = 'lerobot-lang-viewer'

    def setup(self) -> None:
        super().setup()
        self.server.owner._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except _CLIENT_GONE:
            pass
        finally:
            self.server.owner._unregister(self.connection)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        logger.debug('%s %s', self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = self.path.split('?', 1)[0]
        owner = self.server.owner
        try:
            if path in ('/', '/index.html'):
                body = _PAGE.format(title=html.escape(owner.title),
                                    status=html.escape(owner.status_line())).encode()
                self._send_body(body, 'text/html; charset=utf-8')
            elif path == '/stream':
                self._stream(owner)
            elif path == '/latest.jpg':
                seq, jpeg = owner._hub.latest()
                self._send_body(jpeg, 'image/jpeg', {'X-Frame-Seq': str(seq)})
            elif path == '/healthz':
                self._send_body(json.dumps(owner.health()).encode(), 'application/json')
            else:
                self.send_error(HTTPStatus.NOT_FOUND, 'try / or /stream')
        except _CLIENT_GONE as exc:
            logger.debug('client %s went away: %s', self.address_string(), exc)

    def _send_body(self, body: bytes, content_type: str,
                   extra: Optional[dict[str, str]] = None) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Cache-Control', 'no-store')
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, owner: 'MjpegServer') -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header('Content-Type', f'multipart/x-mixed-replace; boundary={BOUNDARY}')
        self.send_header('Cache-Control', 'no-store, no-cache, must-revalidate')
        self.send_header('Pragma', 'no-cache')
        self.send_header('Connection', 'close')
        self.end_headers()
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _STREAM_SNDBUF)
        except OSError:  # not every platform lets us shrink it; the stream still works
            pass
        owner._stream_started()
        try:
            last = -1
            while not owner._stopping.is_set():
                seq, jpeg = owner._hub.wait_newer(last, _KEEPALIVE_S)
                if jpeg is None:
                    break
                self.wfile.write(b''.join((
                    f'--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n'
                    f'Content-Length: {len(jpeg)}\r\nX-Frame-Seq: {seq}\r\n\r\n'.encode(),
                    jpeg, b'\r\n')))
                last = seq
        finally:
            owner._stream_ended()


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True  # the owner joins handler threads itself, with a deadline
    allow_reuse_address = True

    def __init__(self, address, owner: 'MjpegServer') -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        # A client vanishing mid-request is routine for a live view; anything else is a bug.
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug('client %s went away', client_address, exc_info=True)
        else:
            logger.warning('error while serving %s', client_address, exc_info=True)


class MjpegServer:
    """Serves the latest published frame to any number of browsers as an MJPEG stream."""

    def __init__(self, host: str = '127.0.0.1', port: int = 8010, *,
                 title: str = 'lerobot_lang_nodes live view', jpeg_quality: int = 80,
                 placeholder_size: tuple[int, int] = (640, 360)) -> None:
        if not 1 <= jpeg_quality <= 95:
            raise MjpegServerError(f'jpeg_quality must be within [1, 95], got {jpeg_quality}')
        if not 0 <= port <= 65535:
            raise MjpegServerError(f'port must be within [0, 65535], got {port}')
        self.title = title
        self._requested = (host, port)
        self._quality = jpeg_quality
        self._hub = _FrameHub(placeholder_jpeg(*placeholder_size, quality=jpeg_quality),
                              jpeg_quality)
        self._status = ''
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._streams = 0
        self._stopping = threading.Event()
        self._httpd: Optional[_HttpServer] = None
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> 'MjpegServer':
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise MjpegServerError('MjpegServer.start() called twice')
        host, port = self._requested
        try:
            self._httpd = _HttpServer((host, port), self)
        except OSError as exc:
            raise MjpegServerError(
                f'cannot bind the live view to {host}:{port}: {exc} '
                '(is another viewer running? set the port parameter, 0 picks a free one)'
            ) from exc
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={'poll_interval': 0.2},
                                        name=f'mjpeg-{self.port}', daemon=True)
        self._thread.start()
        logger.info('live view on %s', self.url)
        return self

    def stop(self, timeout: float = 3.0) -> None:
        """Stop serving, disconnect clients and join all threads; safe to call twice."""
        if self._httpd is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._hub.close()
        self._httpd.shutdown()  # returns once serve_forever has exited
        with self._lock:
            conns = dict(self._conns)
        for conn in conns:
            # Unblocks a handler stuck in send() to a client that stopped reading.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in [self._thread, *conns.values()]:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in conns.values() if t.is_alive()]
        if alive:
            logger.warning('MJPEG handler threads still alive after stop: %s', alive)
        self._httpd.server_close()

    def __enter__(self) -> 'MjpegServer':
        return self.start() if self._httpd is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- properties -------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._httpd.server_address[0] if self._httpd else self._requested[0]

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one if constructed with port 0)."""
        if self._httpd is None:
            raise MjpegServerError('MjpegServer is not started; the port is not bound yet')
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.host
        return f'http://{f"[{host}]" if ":" in host else host}:{self.port}/'

    @property
    def clients(self) -> int:
        """Number of connected `/stream` clients."""
        with self._lock:
            return self._streams

    # -- publishing -------------------------------------------------------------------------

    def publish(self, frame: np.ndarray) -> int:
        """Make ``frame`` (HxWx3 uint8 RGB) the current frame; never blocks on clients."""
        # Copy: the caller may reuse its buffer while a client thread encodes this one.
        return self._hub.publish(as_rgb8(frame, 'frame').copy(), None)

    def publish_jpeg(self, jpeg: bytes) -> int:
        """Make already encoded JPEG bytes the current frame."""
        if not jpeg.startswith(b'\xff\xd8'):
            raise MjpegServerError('publish_jpeg() expects JPEG bytes (missing SOI marker)')
        return self._hub.publish(None, bytes(jpeg))

    def set_status(self, text: str) -> None:
        """Free text shown on the page's status line (e.g. the current subtask)."""
        with self._lock:
            self._status = text

    def status_line(self) -> str:
        h = self.health()
        state = 'live' if h['has_frame'] else 'waiting for cameras'
        return f"{state} | frames {h['frames']} | clients {h['clients']}" + (
            f" | {h['status']}" if h['status'] else '')

    def health(self) -> dict:
        last = self._hub.last_publish_monotonic
        with self._lock:
            status, clients = self._status, self._streams
        frames = self._hub.seq
        return {'ok': True, 'has_frame': frames > 0, 'frames': frames, 'clients': clients,
                'last_frame_age_s': None if last is None else time.monotonic() - last,
                'status': status}

    # -- handler bookkeeping ----------------------------------------------------------------

    def _register(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns[conn] = threading.current_thread()

    def _unregister(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.pop(conn, None)

    def _stream_started(self) -> None:
        with self._lock:
            self._streams += 1

    def _stream_ended(self) -> None:
        with self._lock:
            self._streams -= 1
