"""What the `gregor` command tells a user when something fails: `CliError` (one line, exit status
1, raised anywhere below `main`) and `describe()`, which turns confluent-kafka's and our own
codec's errors into readable text instead of `KafkaError{code=...,val=...,str="..."}`."""

from __future__ import annotations

import re
from typing import Any


class CliError(Exception):
    """A failure the user can act on: `main` prints `gregor: <message>` and exits with 1."""


# Kafka's wording for a bad config value, rewritten as the key first:
# 'Invalid value abc for configuration retention.ms: not a valid long'
# -> 'retention.ms: not a valid long ("abc")'
_INVALID_VALUE = re.compile(
    r"^Invalid value (?P<value>.*) for configuration (?P<key>[^:\s]+): (?P<why>.+)$"
)


def describe(error: Any) -> str:
    """Readable text for a KafkaException, a KafkaError, or any other exception."""
    args = getattr(error, "args", None)
    if args and hasattr(args[0], "code") and hasattr(args[0], "str"):
        error = args[0]  # a KafkaException wraps one KafkaError
    if hasattr(error, "name") and hasattr(error, "str") and callable(error.str):
        return _kafka_error_text(error.name(), error.str())
    return str(error) or type(error).__name__


def error_text(code: int, message: str | None = None) -> str:
    """Readable text for an error code and message from a response decoded by our own codec."""
    from gregor.protocol import errors

    return _kafka_error_text(errors.name_of(code), message or "")


def _kafka_error_text(name: str, message: str) -> str:
    message = message.strip()
    # librdkafka's own description of a code ("Broker: Unknown topic or partition") says no more
    # than the code; a broker's message ("Topic 'x' already exists.") says more, so it stands alone.
    generic = not message or message.startswith(("Broker: ", "Local: "))
    if generic:
        text = message.partition(": ")[2] or name.lower().replace("_", " ")
        return f"{_sentence(text)} ({name})"
    found = _INVALID_VALUE.match(message)
    if found:
        return f'{found["key"]}: {found["why"]} ("{found["value"]}")'
    return _sentence(message)


def _sentence(text: str) -> str:
    text = text.rstrip(".")
    if text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    return text
