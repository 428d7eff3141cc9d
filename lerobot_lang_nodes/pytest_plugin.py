"""The test suite's pytest plugin (test/conftest.py loads it): the fault report and the skip gate.

**Fault report.** A test that injects faults takes the ``fault_report`` fixture and opens its
row before it injects anything, then counts what it measured, before it asserts on it::

    row = fault_report.row('policy killed mid-chunk, restarted', note='...')
    with row.injection():      # one injection (or a burst of n: injection(n)), survived
                               # only if the block (the injection and its checks) completes
        ...inject, check...
    row.injections += n        # or count a batch: injections made,
    row.survived += k          # the ones the protection held against,
    row.record(unsafe=u, lost=l)  # unsafe dispatches and lost items seen (summed)
    assert ...                 # then the test's verdict

A row stays in the table whatever the outcome: a test that fails (set-up, call or teardown)
marks its rows FAILED, and one that failed before it opened a row gets a row of its own, so a
broken protection shows as a failure instead of removing its row. Rows of one fault class
(parameters, hypothesis examples) are summed. Unsafe dispatches and lost items a test does not
measure show as ``-``. The table is printed at the end of the run and written as Markdown to
``$FAULTS_REPORT`` (bench/faults.py sets it).

**Skip gate.** With ``LEROBOT_LANG_REQUIRE_NO_SKIP=1`` (.ci/run sets it) every skipped test or
test module fails the run, unless the skip's reason starts with ``platform:`` (a test that
cannot run on this operating system at all, e.g. one that needs Linux's /proc). A missing
dependency is never such a reason: the suite's dependencies are installed by the test command
(`scripts/setup.sh --ml --robocasa`), so a skip for one in CI means a requirement drifted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REQUIRE_NO_SKIP_ENV = 'LEROBOT_LANG_REQUIRE_NO_SKIP'
PLATFORM_SKIP = 'platform:'  # the reason prefix of a skip the gate allows
FAULTS_REPORT_ENV = 'FAULTS_REPORT'


# --- skip gate ---------------------------------------------------------------------------
def _skip_reason(longrepr: object) -> str:
    """The reason of a skip report (pytest keeps it as (path, line, 'Skipped: reason'))."""
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else \
        str(longrepr)
    return reason.removeprefix('Skipped: ')


def unexpected_skip(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """Why ``report`` must fail the run under the gate, or None (not a skip, or allowed)."""
    if os.environ.get(REQUIRE_NO_SKIP_ENV) != '1' or not report.skipped \
            or hasattr(report, 'wasxfail'):
        return None
    reason = _skip_reason(report.longrepr)
    if reason.startswith(PLATFORM_SKIP):
        return None
    return (f'{REQUIRE_NO_SKIP_ENV}=1: unexpected skip ({reason}); only a skip whose reason '
            f'starts with {PLATFORM_SKIP!r} may skip here')


_SKIPPED_MODULES = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    """A module-level skip (importorskip, skip(allow_module_level=True)) under the gate stays a
    skip, so the rest of the suite still runs (a collection error would interrupt it); it is
    listed at the end and fails the run (pytest_sessionfinish)."""
    report = yield
    why = unexpected_skip(report)
    if why is not None:
        collector.config.stash[_SKIPPED_MODULES].append(f'{report.nodeid}: {why}')
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash[_SKIPPED_MODULES] and exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo
                              ) -> Iterator[pytest.TestReport]:
    report = yield
    why = unexpected_skip(report)
    if why is not None:  # a test that skipped: failed, with the reason
        report.outcome = 'failed'
        report.longrepr = why
    if report.failed and 'fault_report' in getattr(item, 'fixturenames', ()):
        item.config.stash[_TABLE].failed(item.nodeid, item.name, report.when)
    return report


# --- fault report ------------------------------------------------------------------------
@dataclass
class FaultRow:
    """One fault class: what the tests that inject it counted."""

    fault: str
    note: str = ''
    injections: int = 0
    survived: int = 0
    unsafe: int | None = None  # None: not measured
    lost: int | None = None
    tests: set[str] = field(default_factory=set)  # node ids that added to it
    failed: list[str] = field(default_factory=list)  # 'test name (phase)' of failed ones

    @contextlib.contextmanager
    def injection(self, count: int = 1) -> Iterator[None]:
        """``count`` injections (a burst), counted now; survived only if the block, the
        injection and the checks after it, runs to its end."""
        self.injections += count
        yield
        self.survived += count

    def record(self, *, unsafe: int | None = None, lost: int | None = None) -> None:
        """Add measured unsafe dispatches / lost items (call before asserting on them)."""
        if unsafe is not None:
            self.unsafe = (self.unsafe or 0) + int(unsafe)
        if lost is not None:
            self.lost = (self.lost or 0) + int(lost)

    @property
    def result(self) -> str:
        return f"FAILED ({', '.join(self.failed)})" if self.failed else 'passed'


class FaultTable:
    """Every row of the run, in the order the tests opened them."""

    def __init__(self) -> None:
        self.rows: list[FaultRow] = []

    def row(self, fault: str, nodeid: str, note: str = '') -> FaultRow:
        row = next((r for r in self.rows if r.fault == fault), None)
        if row is None:
            row = FaultRow(fault)
            self.rows.append(row)
        if note:
            row.note = note
        row.tests.add(nodeid)
        return row

    def failed(self, nodeid: str, name: str, when: str) -> None:
        rows = [r for r in self.rows if nodeid in r.tests]
        if not rows:  # failed before it counted anything: still a row, and a failed one
            rows = [self.row(f'{name} (failed before opening its row)', nodeid)]
        for r in rows:
            r.failed.append(name if when == 'call' else f'{name} ({when})')

    def markdown(self) -> str:
        def n(value: int | None) -> str:
            return '-' if value is None else str(value)
        lines = ['| fault class | injections | survived | unsafe dispatches | data lost | '
                 'result | note |', '|---|---:|---:|---:|---:|---|---|']
        lines += [f'| {r.fault} | {r.injections} | {r.survived} | {n(r.unsafe)} | '
                  f'{n(r.lost)} | {r.result} | {r.note} |' for r in self.rows]
        failed = sum(1 for r in self.rows if r.failed)
        lines += ['', f'{len(self.rows) - failed} of {len(self.rows)} fault classes passed. '
                  'Injections are counted as the tests make them, survived where the '
                  "test's checks after that injection held; unsafe dispatches and data lost "
                  'are what the tests measured (`-`: not measured by that test).']
        return '\n'.join(lines)


_TABLE = pytest.StashKey[FaultTable]()


class FaultReport:
    """The ``fault_report`` fixture's value: opens rows of the run's table for one test."""

    def __init__(self, table: FaultTable, nodeid: str) -> None:
        self._table, self._nodeid = table, nodeid

    def row(self, fault: str, note: str = '') -> FaultRow:
        """The row of ``fault`` (opened, or the one other tests of the class opened)."""
        return self._table.row(fault, self._nodeid, note)


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> FaultReport:
    return FaultReport(request.config.stash[_TABLE], request.node.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TABLE] = FaultTable()
    config.stash[_SKIPPED_MODULES] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    skipped = config.stash[_SKIPPED_MODULES]
    if skipped:
        terminalreporter.section('unexpected skips (these fail the run)', red=True)
        for line in skipped:
            terminalreporter.write_line(line)
    table = config.stash[_TABLE]
    if not table.rows:
        return
    terminalreporter.section('fault suite')
    terminalreporter.write_line(table.markdown())
    path = os.environ.get(FAULTS_REPORT_ENV)
    if path:
        Path(path).write_text('# Fault suite\n\nWritten by `bench/faults.py` (pytest test/faults '
                              'and the fault tests beside the code they exercise).\n\n'
                              + table.markdown() + '\n', encoding='utf-8')
        terminalreporter.write_line(f'written to {path}')
