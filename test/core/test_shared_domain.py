"""Two live executors interleave their status; a restarted one does not."""

from lerobot_lang_nodes.core.shared_domain import LiveSources


def test_one_executor_and_a_restart_are_not_rivals():
    sources = LiveSources(window=12, switches=3)
    for _ in range(20):
        sources.note('a')
    assert sources.rivals() == 0 and sources.single()
    for _ in range(3):  # the old executor's last samples, then the restarted one's
        sources.note('a')
    for _ in range(9):
        sources.note('b')
    assert sources.rivals() == 0


def test_two_interleaved_executors_are_rivals_until_one_stops():
    sources = LiveSources(window=12, switches=3)
    for i in range(12):
        sources.note('a' if i % 2 else 'b')
        assert not sources.single() or i == 0
    assert sources.rivals() == 2
    for _ in range(12):  # the other graph went away
        sources.note('a')
    assert sources.rivals() == 0
