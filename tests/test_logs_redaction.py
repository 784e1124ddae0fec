"""Logged tracebacks keep their frames and only the project's own messages.

A `PrivqError`'s message is written by us and never quotes data; any other exception's
may (numpy's "cannot reshape array of size 48842 …", a `ValueError` naming a raw value),
so `format_exception_redacted` prints it as its type name alone — chained ones too.
"""

from __future__ import annotations

import json
import logging

import pytest

from app.errors import InvalidRequest, PrivqError
from app.logs import JsonFormatter, format_exception_redacted

SECRET = "48842"
WITHHELD = "(message withheld: may quote data)"


class LibraryError(Exception):
    """An exception of some library, not of the project."""


def reshape_rows() -> None:
    raise ValueError(f"cannot reshape array of size {SECRET} into shape (2,3)")


def raised(function: object) -> BaseException:
    with pytest.raises(BaseException) as caught:
        function()  # type: ignore[operator]
    return caught.value


def test_the_projects_own_error_keeps_its_message_and_frames() -> None:
    def refuse() -> None:
        raise InvalidRequest("marginals[0] names an unknown attribute")

    text = format_exception_redacted(raised(refuse))
    assert text.startswith("Traceback (most recent call last):\n")
    assert "in refuse" in text
    assert text.endswith("app.errors.InvalidRequest: marginals[0] names an unknown attribute")


def test_any_other_error_is_its_type_and_frames_with_the_message_withheld() -> None:
    text = format_exception_redacted(raised(reshape_rows))
    assert SECRET not in text
    assert f'File "{__file__}"' in text and "in reshape_rows" in text
    assert text.endswith(f"ValueError: {WITHHELD}")

    def library() -> None:
        error = LibraryError(f"row {SECRET}")
        error.add_note(f"while reading {SECRET}")
        raise error

    text = format_exception_redacted(raised(library))
    assert SECRET not in text
    assert text.endswith(f"{__name__}.LibraryError: {WITHHELD}")


def test_chained_exceptions_keep_their_frames_and_lose_their_messages() -> None:
    def caused() -> None:
        try:
            reshape_rows()
        except ValueError as error:
            raise PrivqError("could not count the marginal") from error

    text = format_exception_redacted(raised(caused))
    assert SECRET not in text
    assert "in reshape_rows" in text and "in caused" in text
    assert f"ValueError: {WITHHELD}" in text
    assert "The above exception was the direct cause of the following exception" in text
    assert text.endswith("app.errors.PrivqError: could not count the marginal")

    def during_handling() -> None:
        try:
            {}[f"key-{SECRET}"]
        except KeyError:
            reshape_rows()

    text = format_exception_redacted(raised(during_handling))
    assert SECRET not in text
    assert f"KeyError: {WITHHELD}" in text
    assert "During handling of the above exception, another exception occurred" in text
    assert text.endswith(f"ValueError: {WITHHELD}")


def test_the_formatted_log_line_carries_the_frames_but_not_the_message() -> None:
    error = raised(reshape_rows)
    record = logging.LogRecord(
        "privq.worker",
        logging.ERROR,
        __file__,
        1,
        "job failed on an internal error",
        (),
        (type(error), error, error.__traceback__),
    )
    line = JsonFormatter().format(record)
    assert SECRET not in line
    exc = json.loads(line)["exc"]
    assert "in reshape_rows" in exc and exc.endswith(f"ValueError: {WITHHELD}")


def test_nothing_to_format() -> None:
    assert format_exception_redacted(None) == ""
