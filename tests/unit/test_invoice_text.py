"""invoice-v4's text: visual order by the Unicode bidirectional algorithm with
mirrored brackets, one direction per paragraph, and bounded line breaking."""

from __future__ import annotations

from casesignd.text import shaping as t


def test_brackets_in_right_to_left_text_are_mirrored() -> None:
    shown = t.visual("أحمد (Mohamed) 12")
    assert shown.startswith("12 (Mohamed) "), shown
    assert t.shaped("أحمد")[::-1] in shown
    # Left to right inside a left-to-right paragraph: untouched.
    assert t.visual("Mohamed (أحمد) 12").startswith("Mohamed (")


def test_each_line_of_a_paragraph_keeps_its_direction() -> None:
    # A wrapped line of an Arabic paragraph that begins with a Latin letter.
    assert t.visual("B رقم 7", "R").endswith("B")
    assert t.visual("B رقم 7", "L").startswith("B")
    box = t.Text("رسوم الفصل الدراسي Course MATH-201 B رقم 7 " * 3, size=9)
    box.wrap(120, 1000)
    assert box._base == "R" and len(box._lines) > 2


def test_a_long_word_breaks_into_pieces_that_fit() -> None:
    t.register()
    word = "م" * 500
    lines = t.wrap_lines(word, False, 9, 200)
    assert "".join(lines) == word and len(lines) > 2
    assert all(t.width(line, False, 9) <= 200 for line in lines)
    mixed = "漢字" * 120
    lines = t.wrap_lines(mixed, True, 9, 150)
    assert "".join(lines) == mixed and all(t.width(x, True, 9) <= 150 for x in lines)


def test_allah_is_written_with_letters_the_font_has() -> None:
    assert t.unprintable("عبد الله") is None
    assert "\ufdf2" not in t.shaped("عبد الله")
    assert t.unprintable("\u0915") == "\u0915"  # Devanagari: refused
