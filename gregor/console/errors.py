"""Failures a page answers with a message and a 4xx or 503 status, never a server error."""

from __future__ import annotations


class ConsoleError(Exception):
    """One readable line for the page, with the HTTP status it is answered with."""

    status = 400


class BadInput(ConsoleError):
    status = 400


class Forbidden(ConsoleError):
    status = 403


class NotFound(ConsoleError):
    status = 404


class Conflict(ConsoleError):
    status = 409


class TooLarge(ConsoleError):
    status = 413


class Unavailable(ConsoleError):
    """The cluster did not answer (or answered with an error the user cannot fix here)."""

    status = 503


def kafka_text(exc: BaseException) -> str:
    """Readable text for a KafkaException (its KafkaError's name and message) or another error."""
    error = exc.args[0] if exc.args else None
    if error is not None and hasattr(error, "name") and hasattr(error, "str"):
        message = str(error.str()).strip().rstrip(".")
        name = error.name()
        return f"{message} ({name})" if message and name not in message else message or name
    return str(exc) or type(exc).__name__


def kafka_error_name(exc: BaseException) -> str | None:
    error = exc.args[0] if exc.args else None
    return error.name() if error is not None and hasattr(error, "name") else None
