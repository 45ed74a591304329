"""The soak's RSS verdict (tests.fault.soak.rss_verdict): pure, no processes."""

from __future__ import annotations

from tests.fault.soak import RSS_SLACK, RSS_WARMUP, rss_verdict

MIB = 2**20


def run(rss_at: list[float], period: float = 10.0) -> list[tuple[float, int | None]]:
    """Samples every ``period`` seconds, RSS in MiB as given."""
    return [(i * period, int(mib * MIB)) for i, mib in enumerate(rss_at)]


def test_flat_memory_with_noise_is_flat() -> None:
    rss = [60.0 + (i % 3) for i in range(180)]  # 30 min of samples, +-1 MiB
    flat, why = rss_verdict(run(rss))
    assert flat, why


def test_warm_up_growth_is_not_a_leak() -> None:
    rss = [40.0 + i for i in range(12)] + [90.0] * 168  # fills its caches, then stays
    assert rss_verdict(run(rss))[0]


def test_steady_growth_is_a_leak() -> None:
    # 1 MiB a minute (60 an hour): 16 MiB between the first and the last fifth of the
    # measured 20 minutes of a 30-minute run.
    rss = [80.0 + i / 6 for i in range(180)]
    flat, why = rss_verdict(run(rss))
    assert not flat, why


def test_growth_within_the_slack_is_flat() -> None:
    rss = [80.0] * 90 + [80.0 + RSS_SLACK / MIB * 0.9] * 90  # one step, within the slack
    assert rss_verdict(run(rss))[0]


def test_a_restart_or_a_crash_is_not_flat() -> None:
    samples = run([60.0] * 180)
    samples[100] = (samples[100][0], None)
    flat, why = rss_verdict(samples)
    assert not flat and "not running" in why


def test_too_short_a_run_cannot_be_judged() -> None:
    samples = run([60.0] * int(RSS_WARMUP / 10 + 9))
    flat, why = rss_verdict(samples)
    assert not flat and "too few" in why
