"""The machine's load around a benchmark run: on a shared machine a figure means
little without it."""

from __future__ import annotations

import os


def snapshot() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def describe(start: list[float], end: list[float]) -> str:
    """One line for the table: the load at the start and at the end, and the cores."""
    def fmt(load: list[float]) -> str:
        return " ".join(f"{x:.2f}" for x in load)

    return (f"load average (1, 5, 15 min): {fmt(start)} at the start, {fmt(end)} at the end, "
            f"{os.cpu_count()} cores")
