"""The cron evaluator: parsing, UTC anchoring, and next-time properties."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cells.timer.cron import CronError, CronExpr


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def next_of(expr: str, now: str) -> str:
    found = CronExpr.parse(expr).next_after(at(now))
    assert found is not None
    return found.isoformat().replace("+00:00", "Z")


def test_a_daily_hour_is_that_hour_in_utc_winter_and_summer() -> None:
    assert next_of("0 0 9 * * *", "2026-01-15T00:00:00Z") == "2026-01-15T09:00:00Z"
    assert next_of("0 0 9 * * *", "2026-07-15T00:00:00Z") == "2026-07-15T09:00:00Z"


def test_the_next_time_is_strictly_after_the_whole_second_asked_from() -> None:
    assert next_of("* * * * * *", "2026-01-01T10:00:00.000Z") == "2026-01-01T10:00:01Z"
    assert next_of("* * * * * *", "2026-01-01T10:00:00.999Z") == "2026-01-01T10:00:01Z"
    assert next_of("*/5 * * * * *", "2026-01-01T10:00:04.200Z") == "2026-01-01T10:00:05Z"
    assert next_of("*/5 * * * * *", "2026-01-01T10:00:05Z") == "2026-01-01T10:00:10Z"


def test_an_aware_time_in_another_zone_is_read_as_the_same_instant() -> None:
    berlin = datetime(2026, 1, 15, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    found = CronExpr.parse("0 0 9 * * *").next_after(berlin)
    assert found == datetime(2026, 1, 15, 9, 0, tzinfo=UTC)  # 09:30+01:00 is 08:30Z


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        CronExpr.parse("* * * * * *").next_after(datetime(2026, 1, 1))


def test_lists_ranges_steps_and_names_combine() -> None:
    expr = CronExpr.parse("0,30 5-10/5 */6 ? jan-Mar,DEC MON-FRI")
    assert expr.seconds == (0, 30)
    assert expr.minutes == (5, 10)
    assert expr.hours == (0, 6, 12, 18)
    assert expr.months == (1, 2, 3, 12)
    assert expr.weekdays == frozenset({1, 2, 3, 4, 5})
    assert CronExpr.parse("0 0 0 ? * 5/1").weekdays == frozenset({5, 6, 0})  # 5-7, 7 = Sunday


def test_sunday_is_zero_and_seven() -> None:
    assert next_of("0 0 0 ? * 0", "2026-01-15T00:00:00Z") == "2026-01-18T00:00:00Z"
    assert next_of("0 0 0 ? * 7", "2026-01-15T00:00:00Z") == "2026-01-18T00:00:00Z"
    assert next_of("0 0 0 ? * SUN", "2026-01-15T00:00:00Z") == "2026-01-18T00:00:00Z"


def test_two_restricted_day_fields_match_either_day() -> None:
    # 2026-01-15 is a Thursday: the next Monday (19th) comes before the 1st of February
    assert next_of("0 0 12 1 * MON", "2026-01-15T00:00:00Z") == "2026-01-19T12:00:00Z"
    assert next_of("0 0 12 16 * MON", "2026-01-15T00:00:00Z") == "2026-01-16T12:00:00Z"


def test_one_restricted_day_field_alone_decides() -> None:
    assert next_of("0 0 12 1 * *", "2026-01-15T00:00:00Z") == "2026-02-01T12:00:00Z"
    assert next_of("0 0 12 ? * MON", "2026-01-15T00:00:00Z") == "2026-01-19T12:00:00Z"


def test_the_29th_of_february_waits_for_a_leap_year_and_skips_2100() -> None:
    assert next_of("0 0 0 29 2 ?", "2026-03-01T00:00:00Z") == "2028-02-29T00:00:00Z"
    assert next_of("0 0 0 29 2 ?", "2096-03-01T00:00:00Z") == "2104-02-29T00:00:00Z"


def test_a_31st_skips_the_short_months() -> None:
    assert next_of("0 0 0 31 * ?", "2026-04-01T00:00:00Z") == "2026-05-31T00:00:00Z"


def test_the_year_rolls_over() -> None:
    assert next_of("59 59 23 31 12 ?", "2026-12-31T23:59:59Z") == "2027-12-31T23:59:59Z"
    assert next_of("0 0 0 1 1 ?", "2026-12-31T23:59:59Z") == "2027-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * * *", r"^expected 6 fields .*got 5$"),
        ("* * * * * * *", r"got 7$"),
        ("60 * * * * *", r"^second: 60 is outside 0-59$"),
        ("* * 24 * * *", r"^hour: 24 is outside 0-23$"),
        ("* * * 0 * *", r"^day-of-month: 0 is outside 1-31$"),
        ("* * * * 13 *", r"^month: 13 is outside 1-12$"),
        ("* * * * * 8", r"^day-of-week: 8 is outside 0-7$"),
        ("? * * * * *", r"^second: '\?' is allowed only in the day fields$"),
        ("*/0 * * * * *", r"^second: step '0' must be a whole number >= 1$"),
        ("10-5 * * * * *", r"^second: range '10-5' runs backwards$"),
        ("* * * * FOO *", r"^month: 'FOO' is not a number or a name"),
        ("* * * * * L", r"^day-of-week: 'L' is not a number"),
        ("1,,2 * * * * *", r"^second: empty item"),
        ("0 0 0 30 2 ?", r"never fires"),
        ("0 0 0 31 4,6 ?", r"never fires"),
    ],
)
def test_malformed_expressions_say_which_field_is_wrong(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        CronExpr.parse(expr)


# -- properties -------------------------------------------------------------------------------


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    single = value.map(str)
    span = st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}")
    stepped = st.tuples(st.sampled_from(["*", str(low)]), st.integers(1, high - low + 1)).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    items = st.lists(st.one_of(single, span, stepped), min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), items)


EXPRESSIONS = st.tuples(
    _field(0, 59),
    _field(0, 59),
    _field(0, 23),
    st.one_of(st.just("?"), _field(1, 31)),
    _field(1, 12),
    st.one_of(st.just("?"), _field(0, 7)),
).map(" ".join)

INSTANTS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC)
)


def _parsed(text: str) -> CronExpr:
    try:
        return CronExpr.parse(text)
    except CronError:
        assume(False)
        raise


def _reference_next(expr: CronExpr, now: datetime) -> datetime:
    """The first matching second after ``now``, by plain enumeration day by day."""
    floor = now.replace(microsecond=0)
    day = floor.date()
    while True:
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        if midnight.month in expr.months and expr.matches(
            midnight.replace(hour=expr.hours[0], minute=expr.minutes[0], second=expr.seconds[0])
        ):
            for hour, minute, second in itertools.product(expr.hours, expr.minutes, expr.seconds):
                candidate = midnight.replace(hour=hour, minute=minute, second=second)
                if candidate > floor:
                    return candidate
        day = day + timedelta(days=1)
        assert day < date(2200, 1, 1)


@settings(max_examples=300, deadline=None)
@given(text=EXPRESSIONS, now=INSTANTS)
def test_the_next_time_matches_every_field_and_nothing_earlier_does(
    text: str, now: datetime
) -> None:
    expr = _parsed(text)
    found = expr.next_after(now)
    assert found is not None
    assert found > now
    assert found.microsecond == 0
    assert found.tzinfo is not None
    assert found.utcoffset() == timedelta(0)
    assert expr.matches(found)
    assert found == _reference_next(expr, now)


@settings(max_examples=200, deadline=None)
@given(text=EXPRESSIONS, now=INSTANTS)
def test_asking_again_from_a_firing_time_moves_on(text: str, now: datetime) -> None:
    expr = _parsed(text)
    first = expr.next_after(now)
    assert first is not None
    second = expr.next_after(first)
    assert second is not None
    assert second > first
    assert expr.next_after(first + timedelta(microseconds=999_999)) == second
