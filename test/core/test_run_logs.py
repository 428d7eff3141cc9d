"""The JSON-lines run logs (dispatch and inference): what a benchmark or a user reads back."""

from __future__ import annotations

import pytest

from lerobot_lang_nodes.core.dispatch_file import DispatchFile, read_dispatch_file
from lerobot_lang_nodes.core.inference_file import InferenceFile, read_inference_file


def test_inference_records_read_back_and_a_torn_last_line_is_left_out(tmp_path) -> None:
    path = tmp_path / 'logs' / 'inference.jsonl'  # the folder is created
    log = InferenceFile(path)
    log.write(revision=3, flush_revision=3, context_wall=10.0, start=10.25, end=10.3125,
              stamp=4.5, outcome='published', sequence=7, rtc_delay=3)
    log.write(revision=2, flush_revision=2, context_wall=None, start=9.9, end=10.4,
              stamp=4.4, outcome='discarded')
    with path.open('a') as f:
        f.write('{"revision": 4, "start"')  # a process killed mid-line
    log.close()
    first, second = read_inference_file(path)
    assert first == {'revision': 3, 'flush_revision': 3, 'context_wall': 10.0, 'start': 10.25,
                     'end': 10.3125, 'latency_s': 0.0625, 'stamp': 4.5,
                     'outcome': 'published', 'sequence': 7, 'rtc_delay': 3}
    assert second['context_wall'] is None and second['sequence'] is None
    assert second['rtc_delay'] is None  # an inference without real-time chunking
    assert second['outcome'] == 'discarded' and second['latency_s'] == pytest.approx(0.5)


def test_an_unknown_outcome_is_refused(tmp_path) -> None:
    log = InferenceFile(tmp_path / 'inference.jsonl')
    with pytest.raises(ValueError, match='not one of'):
        log.write(revision=1, flush_revision=1, context_wall=None, start=0.0, end=0.1,
                  stamp=0.0, outcome='ok')
    log.close()
    assert read_inference_file(tmp_path / 'inference.jsonl') == []


def test_dispatch_records_append_across_writers(tmp_path) -> None:
    path = tmp_path / 'dispatch.jsonl'
    for step in range(2):  # a restarted node appends to the same file
        log = DispatchFile(path)
        log.write(t=1.0 + step, wall=5.0 + step, sequence=1, revision=2, step=step,
                  action=[0.1234567891, -0.5])
        log.close()
    rows = read_dispatch_file(path)
    assert [r['step'] for r in rows] == [0, 1]
    assert rows[0]['action'] == [0.123457, -0.5] and rows[1]['t'] == 2.0
    assert read_dispatch_file(tmp_path / 'missing.jsonl') == []
