"""Secrets from ``${VAR}`` never leave: every place text goes out replaces their values
with the variable's name.

The config loader collects each value it interpolated; errors stored for calls (and so
in audit rows), config errors and log records pass through a ``Redactor`` made from them.
A value is also replaced in the forms it takes once encoded on its way out or back: as
httpx writes it into a URL or sends it as a query parameter, as ``quote`` and
``quote_plus`` encode it, and escaped inside a JSON string.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from urllib.parse import quote, quote_plus, unquote_plus

import httpx

from ..errors import ConfigError

# Shorter values are too likely to be ordinary words or numbers to replace everywhere.
MIN_SECRET_CHARS = 4


class Redactor:
    """Replaces the values of ``${VAR}`` secrets in text with ``${VAR}``."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        pairs: dict[str, str] = {}
        for name, value in (secrets or {}).items():
            if len(value) < MIN_SECRET_CHARS:
                continue
            for form in _encoded_forms(value):
                if len(form) >= MIN_SECRET_CHARS:
                    pairs[form] = "${" + name + "}"
        # Longest first, so a secret containing another is replaced whole.
        self._pairs = sorted(pairs.items(), key=lambda pair: -len(pair[0]))

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __call__(self, text: str) -> str:
        for value, name in self._pairs:
            if value in text:
                text = text.replace(value, name)
        return text

    def safe_cut(self, text: str) -> int:
        """Where ``text``, the start of a longer text, may be cut so that no form of a
        secret lies across the cut: what follows it may still complete one."""
        if not self._pairs:
            return len(text)
        cut = max(0, len(text) - len(self._pairs[0][0]) + 1)
        moved = True
        while moved:
            moved = False
            for value, _ in self._pairs:
                start = text.find(value, max(0, cut - len(value) + 1))
                if start != -1 and start < cut:
                    cut, moved = start, True  # across the cut: keep it whole, after it
        return cut

    def config_error(self, error: ConfigError) -> ConfigError:
        """``error`` with every secret in its reason replaced."""
        return ConfigError(self(error.reason), file=error.file, tool=error.tool)


def _encoded_forms(value: str) -> set[str]:
    """``value``, stripped, and each encoded form of it a service or a library may show."""
    # Written into a URL's query, a value is read as form-encoded (``+`` a space): the HTTP
    # handler sends it so read, and the service decodes it so.
    read = unquote_plus(value)
    forms = {value, value.strip(), read}
    for each in {value, read}:
        forms |= {json.dumps(each)[1:-1], json.dumps(each, ensure_ascii=False)[1:-1]}
        # Text that is not UTF-8 (undecodable bytes of the environment) has no URL form.
        with contextlib.suppress(UnicodeError):
            # quote_plus is how httpx (urlencode) writes a query parameter's value.
            forms |= {quote(each, safe=""), quote(each), quote_plus(each), *_in_url(each)}
    return forms


def _in_url(value: str) -> Iterator[str]:
    """``value`` as httpx writes it into a URL's query, password and path, where it can."""
    # Ordered by what each refuses: a control character all three, ``?`` only the path.
    with contextlib.suppress(httpx.InvalidURL):
        if "#" not in value:  # which would end the query
            yield httpx.URL(f"http://host/?{value}").query.decode()
        url = httpx.URL("http://host/")
        yield url.copy_with(password=value).userinfo.decode()[1:]
        yield url.copy_with(path="/" + value).raw_path.decode()[1:]


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
