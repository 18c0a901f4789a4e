"""Secrets from ``${VAR}`` never leave: every place text goes out replaces their values
with the variable's name.

The config loader collects each value it interpolated; errors stored for calls (and so
in audit rows), config errors and log records pass through a ``Redactor`` made from them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..errors import ConfigError

# Shorter values are too likely to be ordinary words or numbers to replace everywhere.
MIN_SECRET_CHARS = 4


class Redactor:
    """Replaces the values of ``${VAR}`` secrets in text with ``${VAR}``."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        pairs: dict[str, str] = {}
        for name, value in (secrets or {}).items():
            for variant in (value, value.strip()):
                if len(variant) >= MIN_SECRET_CHARS:
                    pairs[variant] = "${" + name + "}"
        # Longest first, so a secret containing another is replaced whole.
        self._pairs = sorted(pairs.items(), key=lambda pair: -len(pair[0]))

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __call__(self, text: str) -> str:
        for value, name in self._pairs:
            if value in text:
                text = text.replace(value, name)
        return text

    def config_error(self, error: ConfigError) -> ConfigError:
        """``error`` with every secret in its reason replaced."""
        return ConfigError(self(error.reason), file=error.file, tool=error.tool)


_installed: list[Redactor] = []


def redact_logs(redactor: Redactor) -> None:
    """Make every log record of this process pass through ``redactor`` (and any installed
    before it), whatever logger or handler it goes to."""
    if not redactor:
        return
    if not _installed:
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:
                return record
            cleaned = message
            for each in _installed:
                cleaned = each(cleaned)
            if cleaned != message:
                record.msg, record.args = cleaned, ()
            if record.exc_info and not record.exc_text:
                text = logging.Formatter().formatException(record.exc_info)
                for each in _installed:
                    text = each(text)
                record.exc_text = text
            return record

        logging.setLogRecordFactory(factory)
    _installed.append(redactor)
