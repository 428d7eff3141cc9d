"""Minimal MJPEG client (http.client) for tests and tools that check the live view."""

from __future__ import annotations

import http.client
import io
import time
from typing import Callable, Iterator, Optional

import numpy as np
from PIL import Image


class MjpegClientError(RuntimeError):
    """The server's answer is not the MJPEG stream or page that was expected."""


def fetch(host: str, port: int, path: str = '/', timeout: float = 5.0
          ) -> tuple[int, dict[str, str], bytes]:
    """GET ``path``; returns (status, lower-cased headers, body)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request('GET', path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def decode_jpeg(data: bytes) -> np.ndarray:
    """Decode JPEG bytes to an HxWx3 uint8 RGB array."""
    with Image.open(io.BytesIO(data)) as img:
        if img.format != 'JPEG':
            raise MjpegClientError(f'expected a JPEG part, got {img.format}')
        return np.asarray(img.convert('RGB'))


def read_multipart_part(fp, boundary: str) -> tuple[dict[str, str], bytes]:
    """Read one part (lower-cased headers, body) of a multipart body from file object ``fp``."""
    marker = b'--' + boundary.encode()
    while True:  # skip the CRLF after the previous body and any preamble
        line = fp.readline()
        if not line:
            raise EOFError('MJPEG stream ended')
        if line.rstrip(b'\r\n') == marker:
            break
        if line.rstrip(b'\r\n') == marker + b'--':
            raise EOFError('MJPEG stream closed by the server')
    headers: dict[str, str] = {}
    while True:
        line = fp.readline()
        if not line:
            raise EOFError('MJPEG stream ended inside part headers')
        if line in (b'\r\n', b'\n'):
            break
        key, _, value = line.decode('latin-1').partition(':')
        headers[key.strip().lower()] = value.strip()
    if 'content-length' not in headers:
        raise MjpegClientError('MJPEG part without Content-Length')
    length = int(headers['content-length'])
    body = fp.read(length)
    if len(body) != length:
        raise EOFError('MJPEG stream ended inside a part body')
    return headers, body


class MjpegStreamReader:
    """Reads the parts of a multipart/x-mixed-replace JPEG stream one at a time."""

    def __init__(self, host: str, port: int, path: str = '/stream',
                 timeout: float = 5.0) -> None:
        self._conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self._conn.request('GET', path)
        self._resp = self._conn.getresponse()
        ctype = self._resp.getheader('Content-Type', '')
        if self._resp.status != 200 or not ctype.startswith('multipart/x-mixed-replace'):
            self.close()
            raise MjpegClientError(f'{path}: status {self._resp.status}, type {ctype!r}')
        params = dict(p.strip().split('=', 1) for p in ctype.split(';')[1:] if '=' in p)
        boundary = params.get('boundary', '').strip('"')
        if not boundary:
            self.close()
            raise MjpegClientError(f'{path}: no boundary in Content-Type {ctype!r}')
        self.boundary = boundary

    def read_part(self) -> tuple[dict[str, str], bytes]:
        """Return the next part's (lower-cased headers, body); raises EOFError at the end."""
        return read_multipart_part(self._resp, self.boundary)

    def read_frame(self) -> tuple[dict[str, str], np.ndarray]:
        """Return the next part decoded as an RGB array."""
        headers, body = self.read_part()
        return headers, decode_jpeg(body)

    def frames(self) -> Iterator[tuple[dict[str, str], np.ndarray]]:
        while True:
            try:
                yield self.read_frame()
            except EOFError:
                return

    def wait_for(self, predicate: Callable[[np.ndarray], bool], timeout: float
                 ) -> Optional[np.ndarray]:
        """Read frames until ``predicate(frame)`` holds or ``timeout`` s pass; None if not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, frame = self.read_frame()
            if predicate(frame):
                return frame
        return None

    def close(self) -> None:
        try:
            self._resp.close()
        finally:
            self._conn.close()

    def __enter__(self) -> 'MjpegStreamReader':
        return self

    def __exit__(self, *exc) -> None:
        self.close()
