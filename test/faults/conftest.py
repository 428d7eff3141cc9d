"""The fault suite's report: each test adds a row; the table is printed at the end of the run.

Rows: fault class, injections, survived, unsafe dispatches (must be 0), data lost (must be 0).
With FAULTS_REPORT=<path> (bench/faults.py sets it) the table is also written as Markdown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Row:
    fault: str
    injections: int
    survived: int
    unsafe: int = 0
    lost: int = 0
    note: str = ''


_ROWS: list[Row] = []


class FaultReport:
    def add(self, fault: str, injections: int, survived: int, unsafe: int = 0, lost: int = 0,
            note: str = '') -> None:
        """One row per fault class: a class added again (hypothesis examples) is summed."""
        for row in _ROWS:
            if row.fault == fault:
                row.injections += injections
                row.survived += survived
                row.unsafe += unsafe
                row.lost += lost
                return
        _ROWS.append(Row(fault, injections, survived, unsafe, lost, note))


@pytest.fixture
def fault_report() -> FaultReport:
    return FaultReport()


def table() -> str:
    lines = ['| fault class | injections | survived | unsafe dispatches | data lost | note |',
             '|---|---:|---:|---:|---:|---|']
    lines += [f'| {r.fault} | {r.injections} | {r.survived} | {r.unsafe} | {r.lost} | '
              f'{r.note} |' for r in _ROWS]
    return '\n'.join(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _ROWS:
        return
    terminalreporter.section('fault suite')
    terminalreporter.write_line(table())
    path = os.environ.get('FAULTS_REPORT')
    if path:
        Path(path).write_text('# Fault suite\n\nWritten by `bench/faults.py` (pytest test/faults)'
                              '.\n\n' + table() + '\n', encoding='utf-8')
        terminalreporter.write_line(f'written to {path}')
