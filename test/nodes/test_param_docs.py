"""ARCHITECTURE.md's parameter tables are the nodes' config dataclasses, not a copy of them."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field
from pathlib import Path

from lerobot_lang_nodes.nodes import param_docs

REPO = Path(__file__).resolve().parents[2]


def test_architecture_tables_match_the_dataclasses():
    document = (REPO / 'ARCHITECTURE.md').read_text()
    expected = param_docs.replace_section(document, param_docs.render())
    assert document == expected, (
        'ARCHITECTURE.md parameter tables are out of date: run '
        '`python -m lerobot_lang_nodes.nodes.param_docs ARCHITECTURE.md`')


def test_every_node_config_is_documented():
    # A node declares its parameters with declare_config(self, <Class>): each such class
    # must have its table.
    documented = {target.split(':')[1] for target in param_docs.NODE_CONFIGS.values()}
    declared = set()
    for path in (REPO / 'lerobot_lang_nodes' / 'nodes').glob('*_node.py'):
        declared |= set(re.findall(r'declare_config\(self, (\w+)', path.read_text()))
    assert declared and declared <= documented, sorted(declared - documented)


def test_a_table_row_carries_name_type_default_rules_and_meaning():
    @dataclasses.dataclass(frozen=True)
    class Sample:
        rate_hz: float = field(default=30.0, metadata={
            'doc': 'how often | per second', 'range': (1.0, 120.0), 'runtime': True})
        mode: str = field(default='auto', metadata={'doc': 'm', 'choices': ('auto', 'off')})
        cameras: tuple[str, ...] = field(default=('front',), metadata={'doc': 'c'})

    rows = param_docs.table(Sample).splitlines()[2:]
    assert rows == [
        r'| `rate_hz` | float | 30.0 | 1.0 to 120.0; settable at run time | how often \| per '
        r'second |',
        "| `mode` | str | 'auto' | one of 'auto', 'off' | m |",
        "| `cameras` | str[] | ['front'] |  | c |",
    ]


def test_the_writer_replaces_only_the_marked_section(tmp_path):
    doc = tmp_path / 'A.md'
    doc.write_text(f'before\n{param_docs.BEGIN}\nold table 7f3a\n{param_docs.END}\nafter\n')
    assert param_docs.main([str(doc), '--check']) == 1
    assert param_docs.main([str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith('before\n' + param_docs.BEGIN) and text.endswith(
        param_docs.END + '\nafter\n')
    assert 'old table 7f3a' not in text and '### `planner`' in text
    assert param_docs.main([str(doc), '--check']) == 0
