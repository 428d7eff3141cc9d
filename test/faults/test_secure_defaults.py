"""Secure defaults and bad configuration: what a node or the bring-up does before any fault.

* no code path deserialises untrusted data with pickle, marshal, eval/exec, an unsafe YAML
  loader or torch.load without weights_only (checked on the syntax tree, not by grep, so
  `model.eval()` is not a finding);
* every node refuses a parameters file with an unknown key, a wrong type or an out-of-range
  value at start-up (exit 2), naming the key and, for a range, its bounds;
* every node `lerobot-lang sim` starts keeps DDS discovery on this machine unless the user
  chose otherwise, and the live view listens on 127.0.0.1 only.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lerobot_lang_nodes import graph
from lerobot_lang_nodes.testing import child_pids, free_port, node_command, wait_until

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / 'lerobot_lang_nodes', ROOT / 'bench', ROOT / 'launch', ROOT / 'scripts']
# (file, call): reviewed uses that never see untrusted data.
ALLOWED = {
    # Checks that an exception can cross the pipe to its own emulator child process.
    ('lerobot_lang_nodes/testing.py', 'pickle.loads'),
}
UNSAFE_CALLS = {'pickle.load', 'pickle.loads', 'marshal.load', 'marshal.loads',
                'yaml.unsafe_load', 'yaml.full_load', 'dill.load', 'dill.loads',
                'cloudpickle.load', 'cloudpickle.loads', 'shelve.open'}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f'{_dotted(node.value)}.{node.attr}'
    return ''


def findings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding='utf-8'), str(path))
    rel = path.relative_to(ROOT).as_posix()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        kwargs = {k.arg: k.value for k in node.keywords}
        bad = ''
        if name in UNSAFE_CALLS:
            bad = name
        elif name in ('eval', 'exec'):  # the builtins, not a method such as model.eval()
            bad = name
        elif name == 'yaml.load':
            loader = _dotted(kwargs['Loader']) if 'Loader' in kwargs else ''
            if not loader.endswith(('SafeLoader', 'CSafeLoader')):
                bad = 'yaml.load without SafeLoader'
        elif name == 'torch.load':
            weights_only = kwargs.get('weights_only')
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                bad = 'torch.load without weights_only=True'
        elif name.endswith('np.load') or name == 'numpy.load':
            allow = kwargs.get('allow_pickle')
            if isinstance(allow, ast.Constant) and allow.value is True:
                bad = 'numpy.load with allow_pickle=True'
        if bad and (rel, name) not in ALLOWED:
            out.append(f'{rel}:{node.lineno}: {bad}')
    return out


def test_nothing_deserialises_untrusted_data_unsafely():
    files = [p for d in SOURCES for p in d.rglob('*.py')]
    assert len(files) > 50
    found = [f for p in files for f in findings(p)]
    assert not found, found


def test_the_check_itself_finds_each_unsafe_call(tmp_path):
    sample = ROOT / 'lerobot_lang_nodes' / '_unsafe_sample_for_test.py'
    sample.write_text('import pickle, yaml, torch\n'
                      'pickle.loads(b"")\nyaml.load("a")\ntorch.load("x")\neval("1")\n'
                      'yaml.load("a", Loader=yaml.SafeLoader)\nmodel.eval()\n'
                      'torch.load("x", weights_only=True)\n')
    try:
        found = findings(sample)
    finally:
        sample.unlink()
    assert [f.split(': ', 1)[1] for f in found] == [
        'pickle.loads', 'yaml.load without SafeLoader', 'torch.load without weights_only=True',
        'eval']


# (node name, module, extra parameters it needs to get as far as its parameters, a ranged
# parameter with a value beyond it and the bounds the message must show, a number parameter)
NODES = [
    ('sim_bridge', 'lerobot_lang_nodes.nodes.sim_bridge_node', {}, 'ctrl_hz', 1e5,
     ('1.0', '500.0'), 'ctrl_hz'),
    ('planner', 'lerobot_lang_nodes.nodes.planner_node', {}, 'max_new_tokens', 99999,
     ('1', '4096'), 'high_level_hz'),
    ('policy', 'lerobot_lang_nodes.nodes.policy_node', {}, 'inference_timeout_s', 1e4,
     ('0.0', '600.0'), 'inference_timeout_s'),
    ('viewer', 'lerobot_lang_nodes.nodes.viewer_node', {}, 'port', 70000, ('0', '65535'),
     'port'),
    ('recorder', 'lerobot_lang_nodes.nodes.recorder_node', {}, 'split_duration_s', 1e9,
     ('0.0', '10000000.0'), 'split_duration_s'),
    ('so101_driver', 'lerobot_lang_nodes.nodes.so101_driver_node', {'port': '/dev/null'},
     'ctrl_hz', 1000.0, ('1.0', '200.0'), 'ctrl_hz'),
    ('so101_leader', 'lerobot_lang_nodes.nodes.so101_leader_node', {'port': '/dev/null'},
     'read_hz', 1000.0, ('1.0', '500.0'), 'read_hz'),
    ('camera', 'lerobot_lang_nodes.nodes.camera_node', {}, 'width', 100000, ('0', '7680'),
     'width'),
]


def start_with(tmp_path: Path, name: str, module: str,
               params: dict) -> subprocess.CompletedProcess:
    params_file = tmp_path / f'{name}.yaml'
    params_file.write_text(yaml.safe_dump({name: {'ros__parameters': params}}))
    argv = node_command(module, '-r', f'__node:={name}', params_file=params_file)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize('name,module,extra,ranged,beyond,bounds,number',
                         NODES, ids=[n[0] for n in NODES])
def test_every_node_refuses_a_bad_parameters_file_naming_the_key(
        tmp_path, name, module, extra, ranged, beyond, bounds, number, fault_report):
    row = fault_report.row('bad parameter files (unknown key, wrong type, out of range; every '
                           'node)', note='exit 2 naming the key (and the range)')
    # (the bad file, what its refusal must say)
    cases = {'unknown key': ({'max_relative_targt_rad': 0.1},
                             ["unknown parameter(s) ['max_relative_targt_rad']"]),
             'out of range': ({ranged: beyond}, [f"'{ranged}'", *bounds]),
             'wrong type': ({number: 'fast'}, [f"'{number}'"])}
    failures = {}
    for case, (bad, says) in cases.items():
        row.injections += 1
        out = start_with(tmp_path, name, module, {**extra, **bad})
        text = out.stdout + out.stderr
        if out.returncode == 2 and all(s in text for s in says):
            row.survived += 1
        else:
            failures[case] = f'exit {out.returncode}, expected 2 saying {says}:\n{text[-2000:]}'
    assert not failures, '\n'.join(f'{c}: {f}' for c, f in failures.items())


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f'/proc/{pid}/environ').read_bytes().split(b'\0')
    return dict(item.decode(errors='replace').split('=', 1) for item in raw if b'=' in item)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(ip, port) of the TCP sockets the process listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f'/proc/{pid}/fd').iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(target[8:-1])
    out = set()
    for table in ('tcp', 'tcp6'):
        for line in Path(f'/proc/{pid}/net/{table}').read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == '0A' and cols[9] in inodes:  # LISTEN
                ip_hex, port_hex = cols[1].split(':')
                out.add((ip_hex, int(port_hex, 16)))
    return out


@pytest.mark.slow
def test_the_bring_up_keeps_dds_local_and_the_viewer_on_loopback(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ('ROS_AUTOMATIC_DISCOVERY_RANGE', 'ROS_STATIC_PEERS')}
    port = free_port()
    bringup = subprocess.Popen(
        [sys.executable, '-m', 'lerobot_lang_nodes.cli.main', 'sim', '--task', '',
         '--viewer-port', str(port), '--output-dir', str(tmp_path / 'session'),
         '--timeout', '120'], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        names = {s.name for s in graph.SIM}
        found: dict[str, int] = {}

        def nodes_up() -> bool:
            for pid in child_pids(bringup.pid):
                try:
                    cmd = Path(f'/proc/{pid}/cmdline').read_bytes().split(b'\0')
                except OSError:
                    continue
                text = ' '.join(c.decode(errors='replace') for c in cmd)
                for spec in graph.SIM:
                    if spec.module in text:
                        found[spec.name] = pid
            return set(found) >= names
        wait_until(nodes_up, 60.0, f'the nodes {sorted(names)} started', [])
        for name, pid in found.items():
            assert environ_of(pid).get('ROS_AUTOMATIC_DISCOVERY_RANGE') == 'LOCALHOST', name
        wait_until(lambda: any(p == port for _, p in listening_addresses(found['viewer'])),
                   60.0, 'the viewer listening', [])
        addresses = {ip for ip, p in listening_addresses(found['viewer']) if p == port}
        assert addresses == {'0100007F'}, addresses  # 127.0.0.1 only
    finally:
        if bringup.poll() is None:
            os.killpg(bringup.pid, 2)  # Ctrl-C: the bring-up stops its nodes
            try:
                bringup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(bringup.pid, 9)
                bringup.wait()
