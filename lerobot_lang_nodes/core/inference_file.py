"""A JSON-lines record of every inference the policy node ran (``inference_log_path``).

One line per inference, written when it ends: ``revision`` / ``flush_revision`` (the language
context it was conditioned on), ``context_wall`` (time.monotonic() when the policy received
that context, null for a task-conditioned policy), ``start`` / ``end`` (time.monotonic()
around the backend call, ``added_latency_s`` included), ``latency_s``, ``stamp`` (when the
chunk's row 0 is due: the observation's time, or with real-time chunking where the chunk joins
the one being played), ``rtc_delay`` (the delay in control steps an RTC inference was given;
null without RTC) and ``outcome``: ``published`` (with its
``sequence``), ``discarded`` (an operator change came during it), ``expired`` (every action
already in the past), ``timeout`` or ``failed``. With the dispatch log's ``wall`` (the same
clock, any process of the machine) it says where a reaction's time goes: waiting for the
policy (``start - context_wall``), the inference, and delivery plus the next control tick.
"""

from __future__ import annotations

from lerobot_lang_nodes.core.dispatch_file import JsonLinesFile, read_json_lines

OUTCOMES = ('published', 'discarded', 'expired', 'timeout', 'failed')


class InferenceFile(JsonLinesFile):
    """Inference records of one policy node."""

    def write(self, *, revision: int, flush_revision: int, context_wall: float | None,
              start: float, end: float, stamp: float, outcome: str,
              sequence: int | None = None, rtc_delay: int | None = None) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f'outcome {outcome!r} is not one of {OUTCOMES}')
        self.write_record({
            'revision': int(revision), 'flush_revision': int(flush_revision),
            'context_wall': None if context_wall is None else round(float(context_wall), 6),
            'start': round(float(start), 6), 'end': round(float(end), 6),
            'latency_s': round(float(end) - float(start), 6), 'stamp': round(float(stamp), 6),
            'outcome': outcome, 'sequence': None if sequence is None else int(sequence),
            'rtc_delay': None if rtc_delay is None else int(rtc_delay)})


read_inference_file = read_json_lines  # a torn last line is left out
