"""The progress text matches dockerd's rendering (go-units HumanSize, 50-column bar)."""

from svc.wire.progress import bar, go_duration, human_size


def test_human_size_is_decimal_with_four_digits() -> None:
    assert human_size(0) == "0 B"
    assert human_size(999) == "999 B"
    assert human_size(1000) == "1 kB"
    assert human_size(1_234_567) == "1.235 MB"
    assert human_size(3_400_000) == "3.4 MB"


def test_bar_draws_half_percent_columns() -> None:
    text = bar(1_200_000, 3_400_000)
    assert text.startswith("[" + "=" * 17 + ">" + " " * 33 + "] ")
    assert text.endswith(" 1.2 MB/3.4 MB")
    assert bar(10, 10).startswith("[" + "=" * 50 + ">] ")


def test_bar_without_total_shows_the_count_only() -> None:
    assert bar(2048, 0) == "2.048 kB"
    assert bar(20, 0) == "    20 B"
    assert bar(0, 0) == ""


def test_time_left_from_the_start() -> None:
    assert bar(50, 100, start=100.0, now=110.0).endswith(" 10s")
    assert go_duration(90) == "1m30s"
    assert go_duration(7205) == "2h0m5s"
