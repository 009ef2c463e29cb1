"""The console's pure parts: the stats window and its answer from the store's rows,
and the files the package ships for the page."""

from __future__ import annotations

import re

import pytest

from casesignd.core.errors import ValidationError
from casesignd.http import console
from casesignd.store import Activity


@pytest.mark.parametrize(("raw", "expected"), [
    (None, (3600, 60)), ("60", (60, 60)), ("3600", (3600, 60)), ("3660", (3660, 120)),
    ("86400", (86400, 1440)),
])
def test_windows_have_at_most_sixty_whole_minute_buckets(raw, expected):
    assert console.window_of(raw) == expected
    window_s, bucket_s = expected
    assert bucket_s % 60 == 0 and window_s / bucket_s <= console.MAX_BUCKETS


@pytest.mark.parametrize("raw", ["59", "86401", "x", "", "1e3", "-60"])
def test_a_window_outside_its_bounds_is_refused(raw):
    with pytest.raises(ValidationError) as e:
        console.window_of(raw)
    assert e.value.code == "invalid_field" and e.value.field == "window_s"


def test_the_window_starts_on_a_bucket_boundary():
    assert console.window_start(7265.0, 3600, 60) == 3660.0


def _row(bucket: int, state: str, n: int, mean: float, top: float) -> dict:
    return {"bucket": bucket, "state": state, "n": n,
            **{f"{c}_mean": mean for c in ("admission", "queue_wait", "processing", "total")},
            **{f"{c}_max": top for c in ("admission", "queue_wait", "processing", "total")}}


def test_stats_merge_states_per_bucket_and_leave_canceled_jobs_out_of_the_clocks():
    act = Activity(live={"queued": (2, 100.0), "retry_wait": (1, 40.0), "running": (3, None),
                         "failed": (4, None)},
                   ended=[_row(5, "succeeded", 3, 10.0, 30.0), _row(5, "failed", 1, 50.0, 50.0),
                          _row(5, "canceled", 2, 0.0, 0.0), _row(2, "succeeded", 1, 1.0, 1.0)])
    body = console.stats_body(act, now=200.0, window_s=3600, bucket_s=60, since=0.0)
    assert body["now"] == {"queued": 3, "processing": 3, "failed": 4}
    assert body["oldest_queued_age_s"] == 160.0  # the retry_wait job has waited longest
    assert body["ended"] == {"ready": 4, "failed": 1, "canceled": 2}
    first, second = body["buckets"]
    assert first["start"] == "1970-01-01T00:02:00.000000Z" and first["ready"] == 1
    assert (second["ready"], second["failed"], second["canceled"]) == (3, 1, 2)
    assert second["processing_ms"] == {"mean": 20.0, "max": 50.0}  # (3 x 10 + 50) / 4


def test_stats_of_a_quiet_tenant():
    body = console.stats_body(Activity(live={}, ended=[]), 10.0, 3600, 60, 0.0)
    assert body["now"] == {"queued": 0, "processing": 0, "failed": 0}
    assert body["oldest_queued_age_s"] is None and body["buckets"] == []


def test_the_package_ships_the_page_and_nothing_it_does_not_serve():
    assets = console.load_assets()
    assert {"index.html", "app.js", "api.js", "dom.js", "charts.js", "console.css"} <= set(assets)
    assert assets["app.js"].content_type.startswith("text/javascript")
    page = assets["index.html"].body.decode()
    # Every script is a file of the page (the CSP allows no other), no markup from data.
    assert "<script>" not in page and "http" not in page.replace('http-equiv', '')
    for name, a in assets.items():
        if name.endswith(".js"):
            text = a.body.decode()
            assert "innerHTML" not in text and "localStorage" not in text.replace(
                "never in storage", "") and "document.cookie" not in text, name


def _contrast(a: str, b: str) -> float:
    """WCAG 2.1's contrast ratio of two #rrggbb colours."""
    def luminance(hex_colour: str) -> float:
        c = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_colours_meet_wcag_aa_on_both_backgrounds():
    css = console.load_assets()["console.css"].body.decode()
    colours = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-f]{6});", css))
    for background in (colours["panel"], colours["bg"]):
        for text in ("ink", "muted", "accent", "ok", "bad"):  # text: 4.5:1
            assert _contrast(colours[text], background) >= 4.5, text
        for mark in [k for k in colours if k.startswith("c-")] + ["line"]:  # marks: 3:1
            assert _contrast(colours[mark], background) >= 3.0, mark
    assert _contrast("#ffffff", colours["accent"]) >= 4.5  # a button's label
    assert _contrast("#ffffff", colours["ink"]) >= 4.5  # the header
