"""Rows of form fields for a list a form edits (a release's guardrails, say) instead of a JSON textarea.

`add_rows(form, prefix=, columns=, rows=)` adds a field per column and row, named `<prefix>-<row>-<column>`,
for the rows given (their values as initial) and, when `empty_rows`, empty ones under them to add to the list;
a post's own rows are kept however many there are. `row_fields` hands a template the bound fields row by
row; `row_values` the cleaned values of the rows that hold anything. `posted_rows` says whether a post held
the list at all (a post without it leaves the list as it is)."""

from collections.abc import Callable

from django import forms


def posted_rows(data, prefix: str) -> int:
    """How many rows of `prefix` the post holds: its highest row number + 1 (0: none posted)."""
    numbers = [
        int(parts[1])
        for name in data
        if (parts := name.split("-"))[0] == prefix and len(parts) == 3 and parts[1].isdigit()
    ]
    return max(numbers) + 1 if numbers else 0


def add_rows(
    form: forms.Form,
    *,
    prefix: str,
    columns: dict[str, Callable[[], forms.Field]],
    rows: list[dict],
    empty_rows: int = 2,
) -> int:
    """Adds the fields of every row to `form` and returns how many rows there are."""
    count = max(len(rows), posted_rows(form.data, prefix)) + empty_rows
    for index in range(count):
        values = rows[index] if index < len(rows) else {}
        for column, make in columns.items():
            field = make()
            if column in values:
                field.initial = values[column]
            form.fields[f"{prefix}-{index}-{column}"] = field
    return count


def row_fields(form: forms.Form, *, prefix: str, columns, count: int) -> list[list]:
    return [[form[f"{prefix}-{index}-{column}"] for column in columns] for index in range(count)]


def row_values(cleaned: dict, *, prefix: str, columns, count: int) -> list[tuple[int, dict]]:
    """(row number, {column: value}) of each row with any value; the row's fields leave `cleaned`."""
    rows = []
    for index in range(count):
        values = {column: cleaned.pop(f"{prefix}-{index}-{column}", None) for column in columns}
        if any(value not in (None, "") for value in values.values()):
            rows.append((index, values))
    return rows
