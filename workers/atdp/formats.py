"""The two string formats ATDP v1 uses, checked the same way by jsonschema (workers.atdp.validate) and by the
compiled fast path (workers.atdp.schema_compiler). A value that is not a string passes: its type is the
`type` keyword's to reject."""

import calendar
import re

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_DATE_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))", re.ASCII
)


def is_uuid(instance) -> bool:
    return not isinstance(instance, str) or _UUID.fullmatch(instance) is not None


def is_date_time(instance) -> bool:
    """RFC 3339 `date-time` (section 5.6): a `T` separator and a required offset; fields in range
    (a leap second 60 is allowed)."""
    if not isinstance(instance, str):
        return True
    match = _DATE_TIME.fullmatch(instance)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(match[group]) for group in range(1, 7))
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return False
    if hour > 23 or minute > 59 or second > 60:
        return False
    return not (match[7] is not None and (int(match[7]) > 23 or int(match[8]) > 59))
