"""Six-field cron expressions with seconds, evaluated in UTC.

::

    ┌──────────── second        0-59
    │ ┌────────── minute        0-59
    │ │ ┌──────── hour          0-23
    │ │ │ ┌────── day of month  1-31, or ?
    │ │ │ │ ┌──── month         1-12 or JAN-DEC
    │ │ │ │ │ ┌── day of week   0-7 (0 and 7 are Sunday) or SUN-SAT, or ?
    * * * * * *

Each field is a comma-separated list of items; an item is ``*``, a value, a range ``a-b``, or
any of those with a step (``*/15``, ``10-40/10``, ``5/20`` = from 5 to the field's end).
Names are case-insensitive. ``?`` means "any" and is allowed in the two day fields only.

When both day fields are restricted (neither is ``*`` nor ``?``), a day matches if *either*
matches, as in Vixie cron and meclaw's parser: ``0 0 12 1 * MON`` fires on the 1st and on every
Monday. Day-of-week numbering is Unix's (Sunday 0 or 7), not Quartz's 1-7. ``L``, ``W``, ``#``
and a seventh (year) field are not supported. An expression that can never fire (``0 0 0 30 2
?``) is refused when parsed.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["CronError", "CronExpr"]

_MONTHS = {
    name: number
    for number, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
        start=1,
    )
}
_DAYS = {
    name: number for number, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])
}

_HORIZON_YEARS = 30
"""How far ahead :meth:`CronExpr.next_after` looks. Anything that can fire at all fires within
eight years (a 29 February skips at most one leap day, at a century)."""


class CronError(ValueError):
    """The expression is malformed; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None
    question: bool = False
    """``?`` is allowed (the day fields)."""


_FIELDS = (
    _Field("second", 0, 59),
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31, question=True),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _DAYS, question=True),
)


def _value(field: _Field, text: str) -> int:
    if field.names is not None and text.upper() in field.names:
        return field.names[text.upper()]
    if not (text.isascii() and text.isdigit()):
        raise CronError(f"{field.name}: {text!r} is not a number{_named(field)}")
    number = int(text)
    if not field.low <= number <= field.high:
        raise CronError(f"{field.name}: {number} is outside {field.low}-{field.high}")
    return number


def _named(field: _Field) -> str:
    if field.names is None:
        return ""
    return " or a name (" + ", ".join(field.names) + ")"


def _parse_field(field: _Field, text: str) -> tuple[frozenset[int], bool]:
    """The values a field allows, and whether it is a bare wildcard (``*`` or ``?``)."""
    if text in ("*", "?"):
        if text == "?" and not field.question:
            raise CronError(f"{field.name}: '?' is allowed only in the day fields")
        return frozenset(range(field.low, field.high + 1)), True
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{field.name}: empty item in {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
                raise CronError(f"{field.name}: step {step_text!r} must be a whole number >= 1")
            step = int(step_text)
        if base in ("*", "?"):
            if base == "?" and not field.question:
                raise CronError(f"{field.name}: '?' is allowed only in the day fields")
            start, end = field.low, field.high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _value(field, first), _value(field, last)
            if start > end:
                raise CronError(f"{field.name}: range {base!r} runs backwards")
        else:
            start = _value(field, base)
            end = field.high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values), False


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed expression. Build one with :meth:`parse`."""

    source: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    """0 = Sunday … 6 = Saturday (7 is folded into 0)."""
    any_day: bool
    """Day-of-month is ``*`` or ``?``."""
    any_weekday: bool
    """Day-of-week is ``*`` or ``?``."""

    @classmethod
    def parse(cls, text: str) -> CronExpr:
        if not isinstance(text, str):
            raise CronError("the expression must be a string")
        parts = text.split()
        if len(parts) != 6:
            raise CronError(
                f"expected 6 fields (second minute hour day-of-month month day-of-week), "
                f"got {len(parts)}"
            )
        parsed = [_parse_field(field, part) for field, part in zip(_FIELDS, parts, strict=True)]
        (sec, _), (minute, _), (hour, _), (dom, any_dom), (month, _), (dow, any_dow) = parsed
        expr = cls(
            source=text,
            seconds=tuple(sorted(sec)),
            minutes=tuple(sorted(minute)),
            hours=tuple(sorted(hour)),
            days=dom,
            months=tuple(sorted(month)),
            weekdays=frozenset(d % 7 for d in dow),
            any_day=any_dom,
            any_weekday=any_dow,
        )
        if not expr._can_fire():
            raise CronError(f"{text!r} never fires: no month has the days it names")
        return expr

    def _can_fire(self) -> bool:
        if not self.any_weekday:
            return True  # some weekday always comes round (OR with the days, or alone)
        longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
        return any(d <= longest.get(m, 31) for m in self.months for d in self.days)

    def _day_matches(self, when: datetime) -> bool:
        weekday = (when.weekday() + 1) % 7  # Python: Monday 0; cron: Sunday 0
        in_days = when.day in self.days
        in_weekdays = weekday in self.weekdays
        if not self.any_day and not self.any_weekday:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def matches(self, when: datetime) -> bool:
        """Whether the whole second ``when`` (UTC) is a firing time."""
        when = _utc(when)
        return (
            when.second in self.seconds
            and when.minute in self.minutes
            and when.hour in self.hours
            and when.month in self.months
            and self._day_matches(when)
        )

    def next_after(self, when: datetime) -> datetime | None:
        """The first firing time strictly after the whole second of ``when``, in UTC.

        A firing time is a whole second, so asking from any instant within a second that has
        just fired yields the next one, never the same second again. None only if nothing fires
        within the horizon (which :meth:`parse` rules out).
        """
        current = _utc(when).replace(microsecond=0) + timedelta(seconds=1)
        limit = current.year + _HORIZON_YEARS
        while current.year <= limit:
            if current.month not in self.months:
                current = self._next_month(current)
                continue
            if not self._day_matches(current):
                current = _midnight(current) + timedelta(days=1)
                continue
            hour = _at_or_after(self.hours, current.hour)
            if hour is None:
                current = _midnight(current) + timedelta(days=1)
                continue
            if hour != current.hour:
                current = current.replace(hour=hour, minute=0, second=0)
            minute = _at_or_after(self.minutes, current.minute)
            if minute is None:
                current = current.replace(minute=0, second=0) + timedelta(hours=1)
                continue
            if minute != current.minute:
                current = current.replace(minute=minute, second=0)
            second = _at_or_after(self.seconds, current.second)
            if second is None:
                current = current.replace(second=0) + timedelta(minutes=1)
                continue
            return current.replace(second=second)
        return None

    def _next_month(self, current: datetime) -> datetime:
        month = _at_or_after(self.months, current.month + 1)
        year = current.year
        if month is None:
            year, month = year + 1, self.months[0]
        return datetime(year, month, 1, tzinfo=UTC)


def _at_or_after(values: tuple[int, ...], wanted: int) -> int | None:
    index = bisect_left(values, wanted)
    return values[index] if index < len(values) else None


def _midnight(when: datetime) -> datetime:
    return when.replace(hour=0, minute=0, second=0, microsecond=0)


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("cron times are UTC: pass an aware datetime")
    return when.astimezone(UTC)
