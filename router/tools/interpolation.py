"""``${VAR}`` in the tool config: read from the environment when it loads, each one noted
(``router.trust.redaction`` hides their values), a missing one refused naming its field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def interpolate(
    value: Any,
    env: Mapping[str, str],
    *,
    file: str,
    tool: str | None,
    used: dict[str, str] | None = None,
    at: str = "",
) -> Any:
    """Replace ``${VAR}`` in every string; a missing variable is a config error, naming
    the field (``at``: where ``value`` is in the file). Each variable interpolated is
    noted in ``used``, with its value."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                unset = f"environment variable {name} is not set"
                raise ConfigError(f"{at}: {unset}" if at else unset, file=file, tool=tool)
            if used is not None:
                used[name] = env[name]
            return env[name]

        return _VAR_RE.sub(sub, value)
    if isinstance(value, list):
        return [
            interpolate(item, env, file=file, tool=tool, used=used, at=f"{at}[{index}]")
            for index, item in enumerate(value)
        ]
    if isinstance(value, dict):
        return {
            key: interpolate(
                item, env, file=file, tool=tool, used=used, at=f"{at}.{key}" if at else str(key)
            )
            for key, item in value.items()
        }
    return value


def check_headers(
    headers: Any, env: Mapping[str, str], *, file: str, tool: str | None, where: str
) -> None:
    """Header values must be one line of ASCII once interpolated: refused at load time,
    naming the variable and never its value (an HTTP client would put the value in its
    error, and the error in the call's result and the audit log)."""
    if not isinstance(headers, dict):
        return
    for name, template in headers.items():
        if not isinstance(template, str):
            continue
        for var in _VAR_RE.findall(template):
            value = env.get(var, "")
            if "\r" in value or "\n" in value:
                raise ConfigError(
                    f"{where} header {name}: ${{{var}}} contains a line break (CR or LF)",
                    file=file,
                    tool=tool,
                )
            if not value.isascii():
                raise ConfigError(
                    f"{where} header {name}: ${{{var}}} is not ASCII", file=file, tool=tool
                )
        if ("\r" in template or "\n" in template) or not template.isascii():
            raise ConfigError(
                f"{where} header {name}: value must be one line of ASCII", file=file, tool=tool
            )
