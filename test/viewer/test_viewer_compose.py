"""Composition geometry, labels, header text and speed of the viewer's Composer."""

import time

import numpy as np
import pytest

from lerobot_lang_nodes.viewer.compose import (Annotation, ComposeError, Composer, load_font,
                                               truncate_text, wrap_text)

RED = (200, 30, 30)
BLUE = (20, 40, 210)


def solid(h, w, colour):
    return np.full((h, w, 3), colour, np.uint8)


def test_two_equal_views_side_by_side():
    out = Composer().compose([('front', solid(240, 320, RED)), ('wrist', solid(240, 320, BLUE))])
    assert out.shape == (240, 640, 3) and out.dtype == np.uint8
    # Tile centres keep the source colour exactly (no header, labels sit at the bottom).
    assert tuple(out[120, 160]) == RED
    assert tuple(out[120, 480]) == BLUE


def test_different_sizes_resized_to_common_height():
    views = [('a', solid(240, 320, RED)), ('b', solid(480, 640, BLUE)), ('c', solid(100, 50, RED))]
    out = Composer().compose(views)
    # Default height is the tallest view; widths scale with the aspect ratio.
    assert out.shape == (480, 640 + 640 + 240, 3)
    assert tuple(out[240, 320]) == RED and tuple(out[240, 960]) == BLUE


@pytest.mark.parametrize('height', [101, 200, 239])
def test_output_dimensions_are_even(height):
    views = [('a', solid(240, 321, RED)), ('b', solid(77, 33, BLUE))]
    out = Composer(height=height).compose(views)
    assert out.shape[0] % 2 == 0 and out.shape[1] % 2 == 0
    assert out.shape[0] in (height, height + 1)


def test_header_is_translucent_and_contains_text():
    white = solid(240, 320, (255, 255, 255))
    plain = Composer().compose([('', white), ('', white)])
    assert (plain == 255).all()  # no label, no annotation: the image is untouched
    out = Composer(header_alpha=0.6).compose(
        [('', white), ('', white)],
        Annotation(task='put the red cube in the bowl', subtask='grasp the red cube',
                   memory='the red cube is left of the bowl'))
    header = out[:40].astype(int)
    # Translucent: the header background darkens white to ~255 * 0.4, not to black.
    background = np.median(header[:, 400:], axis=(0, 1))
    assert np.allclose(background, 102, atol=3), background
    # Text pixels: the header region is far from uniform and has bright glyph pixels.
    assert header.std() > 20
    assert (header.min(axis=2) > 200).sum() > 50
    # Below the header the views are untouched.
    assert (out[120:200] == 255).all()


def test_header_text_changes_pixels():
    views = [('front', solid(240, 320, (60, 60, 60)))] * 2
    composer = Composer()
    a = composer.compose(views, Annotation('task A', 'reach', 'nothing'))
    b = composer.compose(views, Annotation('task A', 'grasp the cube', 'nothing'))
    assert a.shape == b.shape
    diff_rows = np.nonzero((a != b).any(axis=(1, 2)))[0]
    assert diff_rows.size > 0 and diff_rows.max() < 60  # only the Subtask line changed


def test_labels_drawn_at_bottom_left_of_each_view():
    views = [('front', solid(240, 320, RED)), ('wrist', solid(240, 320, BLUE))]
    out = Composer().compose(views).astype(int)
    for x0, colour in ((0, RED), (320, BLUE)):
        corner = out[-20:, x0:x0 + 40]
        assert corner.std() > 20, 'label text should make the corner non-uniform'
        assert (corner.min(axis=2) > 200).sum() > 10, 'white label glyphs expected'
        assert tuple(out[-5, x0 + 300]) == colour  # the rest of the bottom row is untouched
    unlabeled = Composer().compose([('', solid(240, 320, RED))])
    assert (unlabeled[:240, :320] == RED).all()


def test_missing_view_gets_waiting_tile_and_empty_list_works():
    out = Composer().compose([('front', solid(240, 320, RED)), ('wrist', None)])
    assert out.shape == (240, 640, 3)
    tile = out[:200, 320:].astype(int)
    assert tile.std() > 5  # "waiting..." text on a grey tile
    empty = Composer().compose([], Annotation('t', 's', 'm'))
    assert empty.shape[0] % 2 == 0 and empty.shape[1] > 0


def test_mono_and_rgba_accepted_bad_input_rejected():
    mono = np.full((240, 320), 128, np.uint8)
    rgba = np.full((240, 320, 4), 50, np.uint8)
    out = Composer().compose([('m', mono), ('r', rgba)])
    assert tuple(out[100, 100]) == (128, 128, 128) and tuple(out[100, 400]) == (50, 50, 50)
    with pytest.raises(ComposeError, match='uint8'):
        Composer().compose([('f', np.zeros((10, 10, 3), np.float32))])
    with pytest.raises(ComposeError, match='HxWx3'):
        Composer().compose([('f', np.zeros((10, 10, 2), np.uint8))])


def test_wrap_and_truncate_fit_width():
    font = load_font(14)
    text = 'the red cube is on the left of the bowl and the gripper is open ' * 4
    lines = wrap_text(text, font, 200, max_lines=2)
    assert len(lines) == 2
    assert all(font.getlength(line) <= 200 for line in lines)
    assert lines[-1].endswith('...')
    assert wrap_text('short', font, 200, 2) == ['short']
    assert font.getlength(truncate_text('x' * 500, font, 50)) <= 50
    long_word = wrap_text('a' * 300, font, 100, 3)
    assert len(long_word) == 3 and all(font.getlength(w) <= 100 for w in long_word)


def test_long_memory_wraps_into_taller_header():
    views = [('', solid(240, 320, (255, 255, 255)))] * 2
    composer = Composer(max_lines_per_field=2)

    def header_rows(out):
        return int((out[:, 500] < 250).any(axis=1).sum())

    short = composer.compose(views, Annotation('t', 's', 'm'))
    long = composer.compose(views, Annotation('t', 's', 'word ' * 400))
    assert header_rows(short) < header_rows(long) < 240


def test_a_dry_run_adds_a_row_with_the_planned_target():
    from lerobot_lang_msgs.msg import RuntimeStatus
    from lerobot_lang_nodes.nodes.viewer_node import dry_run_text
    assert dry_run_text(RuntimeStatus()) == ''  # a live run draws no dry-run row
    text = dry_run_text(RuntimeStatus(dry_run=True, planned=42,
                                      planned_target=[0.1, -0.25, 0.5, 0.75, 0.0, 1.0]))
    assert text == ('the arm holds; planned target (rad) +0.10 -0.25 +0.50 +0.75 +0.00 +1.00 '
                    '(42 actions played)')
    views = [('', solid(240, 320, (255, 255, 255)))] * 2
    composer = Composer()

    def header_rows(out):
        return int((out[:, 500] < 250).any(axis=1).sum())

    live = composer.compose(views, Annotation('t', 's', 'm'))
    dry = composer.compose(views, Annotation('t', 's', 'm', dry_run=text))
    assert header_rows(live) < header_rows(dry)


def test_compose_speed_two_qvga_views():
    rng = np.random.default_rng(0)
    views = [('front', rng.integers(0, 255, (240, 320, 3), np.uint8)),
             ('wrist', rng.integers(0, 255, (240, 320, 3), np.uint8))]
    composer = Composer()
    composer.compose(views, Annotation('task', 'warm up', 'm'))
    times = []
    for i in range(30):
        # A new subtask each frame: the worst case, the header is re-rendered every time.
        t0 = time.perf_counter()
        composer.compose(views, Annotation('put the red cube in the bowl', f'subtask {i}', 'm'))
        times.append(time.perf_counter() - t0)
    assert float(np.median(times)) < 0.010, f'median compose {np.median(times) * 1e3:.2f} ms'
