"""Render-only mesh decimation (vertex clustering) with an on-disk cache in the user cache dir."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

_LOG = logging.getLogger(__name__)

# Bump when the algorithm changes so stale cache entries are never reused.
_ALGORITHM_VERSION = 1
_STL_HEADER_BYTES = 80
_STL_RECORD = np.dtype([('normal', '<f4', (3,)), ('v', '<f4', (3, 3)), ('attr', '<u2')])


class MeshFormatError(ValueError):
    """A mesh file is not a binary STL this module can read."""


def cache_dir() -> Path:
    """Directory for decimated meshes: $LEROBOT_LANG_CACHE, else $XDG_CACHE_HOME, else ~/.cache."""
    root = os.environ.get('LEROBOT_LANG_CACHE')
    if root:
        return Path(root) / 'sim_meshes'
    xdg = os.environ.get('XDG_CACHE_HOME') or str(Path.home() / '.cache')
    return Path(xdg) / 'lerobot_lang_nodes' / 'sim_meshes'


def read_binary_stl(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (N,3) float64 and faces (M,3) int32 of a binary STL, duplicate vertices merged."""
    raw = path.read_bytes()
    if len(raw) < _STL_HEADER_BYTES + 4:
        raise MeshFormatError(f'{path}: too short for a binary STL')
    count = int(np.frombuffer(raw, '<u4', 1, _STL_HEADER_BYTES)[0])
    expected = _STL_HEADER_BYTES + 4 + count * _STL_RECORD.itemsize
    if len(raw) != expected:
        raise MeshFormatError(
            f'{path}: size {len(raw)} != {expected} for {count} triangles; ASCII STL is '
            'not supported, pass decimate=False to use the original meshes')
    records = np.frombuffer(raw, _STL_RECORD, count, _STL_HEADER_BYTES + 4)
    corners = records['v'].reshape(-1, 3).astype(np.float64)
    verts, inverse = np.unique(corners, axis=0, return_inverse=True)
    return verts, inverse.reshape(-1, 3).astype(np.int32)


def cluster_decimate(verts: np.ndarray, faces: np.ndarray, cell: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Merge vertices sharing a grid cell of size ``cell``; drop collapsed and duplicate faces."""
    keys = np.floor((verts - verts.min(axis=0)) / cell).astype(np.int64)
    _, cluster = np.unique(keys, axis=0, return_inverse=True)
    cluster = cluster.reshape(-1)
    n_clusters = int(cluster.max()) + 1
    sums = np.zeros((n_clusters, 3))
    np.add.at(sums, cluster, verts)
    counts = np.bincount(cluster, minlength=n_clusters)[:, None]
    new_verts = sums / counts
    new_faces = cluster[faces]
    keep = ((new_faces[:, 0] != new_faces[:, 1]) & (new_faces[:, 1] != new_faces[:, 2])
            & (new_faces[:, 0] != new_faces[:, 2]))
    new_faces = new_faces[keep]
    # Same triangle with the same winding is redundant; keep one.
    start = np.argmin(new_faces, axis=1)[:, None]
    rolled = np.take_along_axis(new_faces, (start + np.arange(3)) % 3, axis=1)
    _, first = np.unique(rolled, axis=0, return_index=True)
    new_faces = new_faces[np.sort(first)]
    used, remap = np.unique(new_faces.reshape(-1), return_inverse=True)
    return new_verts[used], remap.reshape(-1, 3).astype(np.int32)


def decimate_to(verts: np.ndarray, faces: np.ndarray, max_faces: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Coarsest-needed clustering (bisection on cell size) leaving at most ``max_faces`` faces."""
    if len(faces) <= max_faces:
        return verts, faces
    extent = float(np.max(verts.max(axis=0) - verts.min(axis=0)))
    lo, hi = extent * 1e-4, extent / 4.0
    best = cluster_decimate(verts, faces, hi)
    for _ in range(14):
        mid = np.sqrt(lo * hi)
        candidate = cluster_decimate(verts, faces, mid)
        if len(candidate[1]) <= max_faces:
            best, hi = candidate, mid
        else:
            lo = mid
    return best


def decimated_mesh(path: Path, max_faces: int) -> tuple[np.ndarray, np.ndarray]:
    """Decimated (verts, faces) of ``path``, computed once and cached by content hash."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    target = cache_dir() / f'{path.stem}-{digest}-f{max_faces}-v{_ALGORITHM_VERSION}.npz'
    if target.exists():
        try:
            with np.load(target) as cached:
                return cached['verts'], cached['faces']
        except (OSError, ValueError, KeyError) as exc:
            _LOG.warning('ignoring unreadable mesh cache %s: %s', target, exc)
    verts, faces = decimate_to(*read_binary_stl(path), max_faces)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Atomic rename: concurrent processes never read a half-written cache file.
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix='.npz')
        with os.fdopen(fd, 'wb') as fh:
            np.savez(fh, verts=verts, faces=faces)
        os.replace(tmp, target)
        _LOG.info('cached decimated mesh %s (%d faces)', target, len(faces))
    except OSError as exc:
        _LOG.warning('could not cache decimated mesh in %s: %s', target.parent, exc)
    return verts, faces
