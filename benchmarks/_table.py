"""Printing benchmark results as a table of microseconds and ratios."""

from __future__ import annotations


def print_ratios(results: dict[str, float], baseline: str) -> None:
    """One line per case: microseconds per event and the ratio to ``baseline``."""
    width = max(len(name) for name in results) + 2
    print(f"{'case':<{width}} {'us/event':>9} {'ratio':>7}")
    for name, value in results.items():
        print(f"{name:<{width}} {value:>9.3f} {value / results[baseline]:>7.3f}")
