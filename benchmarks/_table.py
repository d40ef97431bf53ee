"""Printing benchmark results: tables of microseconds and ratios, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass


def print_ratios(results: dict[str, float], baseline: str) -> None:
    """One line per case: microseconds per event and the ratio to ``baseline``."""
    width = max(len(name) for name in results) + 2
    print(f"{'case':<{width}} {'us/event':>9} {'ratio':>7}")
    for name, value in results.items():
        print(f"{name:<{width}} {value:>9.3f} {value / results[baseline]:>7.3f}")


def print_against(results: dict[str, float], baselines: dict[str, str]) -> None:
    """One line per case: microseconds per event and the ratio to that case's own baseline.

    ``baselines`` maps a case to the case it is compared with; cases without
    an entry (the baselines themselves, reference rows) show no ratio.
    """
    width = max(len(name) for name in results) + 2
    print(f"{'case':<{width}} {'us/event':>9} {'ratio':>7}  against")
    for name, value in results.items():
        against = baselines.get(name)
        if against is None:
            print(f"{name:<{width}} {value:>9.3f} {'-':>7}")
        else:
            print(f"{name:<{width}} {value:>9.3f} {value / results[against]:>7.3f}  {against}")


@dataclass(frozen=True)
class Target:
    """One target of a benchmark: its name, what was measured, and whether it was met."""

    name: str
    measured: str
    met: bool


def verdict(targets: list[Target]) -> int:
    """Print one line per target and a final PASS/FAIL line naming them; the exit status."""
    for target in targets:
        print(f"  {'ok  ' if target.met else 'MISS'} {target.name}: {target.measured}")
    missed = [target.name for target in targets if not target.met]
    if missed:
        print(f"FAIL: missed {'; '.join(missed)}")
        return 1
    print(f"PASS: {'; '.join(target.name for target in targets)}")
    return 0
