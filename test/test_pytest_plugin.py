"""The suite's own plugin, run on small test files in a pytest of their own: the fault table
shows a failed protection as a failure, and the skip gate fails the run on an unexpected skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lerobot_lang_nodes import pytest_plugin

FAULT_TESTS = '''
import pytest

def test_batch_all_held(fault_report):
    row = fault_report.row('batch', note='all held')
    row.injections += 4
    row.survived += 4
    row.record(unsafe=0, lost=0)

def test_second_injection_breaks(fault_report):
    row = fault_report.row('two in a row')
    for unsafe in (0, 3):
        with row.injection():
            row.record(unsafe=unsafe)
            assert unsafe == 0, 'an unsafe dispatch'

@pytest.fixture
def rig():
    raise RuntimeError('the rig did not start')

def test_rig_never_started(rig, fault_report):
    fault_report.row('never reached')
'''

SKIP_TESTS = '''
import sys
import pytest

def test_missing_widget():
    pytest.skip('no widget installed')

@pytest.mark.skipif(sys.platform != 'no-such-os', reason='platform: needs no-such-os')
def test_other_os_only():
    pass

@pytest.mark.xfail(reason='a known bug', strict=True)
def test_known_bug():
    assert False

def test_runs():
    pass
'''

MODULE_SKIP = '''
import pytest
pytest.importorskip('no_such_module_anywhere')

def test_never_collected():
    pass
'''


def run_pytest(tmp_path: Path, files: dict[str, str], **env: str
               ) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    environ = {k: v for k, v in os.environ.items()
               if k not in (pytest_plugin.REQUIRE_NO_SKIP_ENV, pytest_plugin.FAULTS_REPORT_ENV)}
    return subprocess.run([sys.executable, '-m', 'pytest', '-p', pytest_plugin.__name__,
                           '-p', 'no:cacheprovider', '-rA', *files],
                          cwd=tmp_path, env={**environ, **env}, capture_output=True, text=True,
                          timeout=120)


def rows(markdown: str) -> dict[str, list[str]]:
    cells = [[c.strip() for c in line.strip('|').split('|')]
             for line in markdown.splitlines() if line.startswith('| ')]
    return {c[0]: c[1:] for c in cells[1:]}


def test_a_failed_protection_is_a_failed_row_with_what_was_measured(tmp_path):
    report = tmp_path / 'faults.md'
    out = run_pytest(tmp_path, {'test_faults.py': FAULT_TESTS}, FAULTS_REPORT=str(report))
    assert out.returncode == 1, out.stdout[-3000:]
    table = rows(report.read_text())
    # injections, survived, unsafe dispatches, data lost, result, note
    assert table['batch'] == ['4', '4', '0', '0', 'passed', 'all held']
    assert table['two in a row'] == ['2', '1', '3', '-', 'FAILED (test_second_injection_breaks)',
                                     '']
    assert table['test_rig_never_started (failed before opening its row)'][:5] == \
        ['0', '0', '-', '-', 'FAILED (test_rig_never_started (setup))']
    assert '1 of 3 fault classes passed' in report.read_text()
    assert '| two in a row |' in out.stdout  # printed as well


def test_the_skip_gate_fails_the_run_on_a_skip_that_is_not_a_platform_one(tmp_path):
    files = {'test_skips.py': SKIP_TESTS, 'test_module_skip.py': MODULE_SKIP}
    ungated = run_pytest(tmp_path, files)
    assert ungated.returncode == 0, ungated.stdout[-3000:]
    assert '1 passed, 3 skipped, 1 xfailed' in ungated.stdout, ungated.stdout[-3000:]

    gated = run_pytest(tmp_path, files, **{pytest_plugin.REQUIRE_NO_SKIP_ENV: '1'})
    assert gated.returncode == 1, gated.stdout[-3000:]
    summary = gated.stdout.splitlines()[-1]
    # The missing widget fails; the platform skip and the expected failure stay what they
    # are; the module that skipped stays skipped (the rest of the suite still runs) but is
    # listed and fails the run.
    assert '1 failed, 1 passed, 2 skipped, 1 xfailed' in summary, gated.stdout[-3000:]
    assert 'unexpected skip (no widget installed)' in gated.stdout
    assert 'unexpected skips (these fail the run)' in gated.stdout
    assert "test_module_skip.py: LEROBOT_LANG_REQUIRE_NO_SKIP=1: unexpected skip (could not " \
        "import 'no_such_module_anywhere'" in gated.stdout
    assert re.search(r'SKIPPED \[1\] test_skips.py:\d+: platform: needs no-such-os', gated.stdout)
