"""The ``notifications`` table of the tool config: channels by name, and the channels each
approver role (and, with ``notify``, each tool) is told through.

Secrets (a webhook's signing secret, a Slack URL, an SMTP password) must be written as
``${VAR}``: only interpolated values are known to the redactor, so only they are sure to
stay out of logs, errors and delivery records.
"""

from __future__ import annotations

import email.policy
import json
import re
from collections.abc import Mapping, Sequence
from email.errors import HeaderParseError
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..names import is_key_name

_ONLY_VAR_RE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ChannelType(StrEnum):
    WEBHOOK = "webhook"
    SLACK = "slack"
    EMAIL = "email"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _sendable(url: str) -> str:
    """``url`` when it names a host and a port a connection can use: one that cannot would
    fail every attempt of every delivery, found only when approvers are not told."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the URL's port must be a number from 1 to 65535") from None
    if port == 0:
        raise ValueError("the URL's port must be a number from 1 to 65535")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise ValueError("the URL holds a space or a control character")
    import httpx  # here: the command line's --help loads no HTTP client

    try:
        httpx.Request("POST", url)  # as a delivery makes it: the host is read here
    except (httpx.InvalidURL, UnicodeError):  # UnicodeError: an invalid international name
        raise ValueError("the URL's host is not a valid host name") from None
    return url


def _mail_address(address: str) -> str:
    """``address`` when it names one mailbox, as a header would carry it (``Finance
    <fin@example.com>`` too): a line break in it would add a header, a comma a recipient."""
    if not address.strip() or not address.isprintable():
        raise ValueError(f"not one email address: {json.dumps(address)}")
    try:
        header = email.policy.default.header_factory("to", address)
    except (ValueError, IndexError, HeaderParseError):
        raise ValueError(f"not one email address: {json.dumps(address)}") from None
    if len(header.addresses) != 1:
        raise ValueError(f"not one email address: {json.dumps(address)}")
    return address


SendableUrl = Annotated[str, Field(pattern=r"^https?://"), AfterValidator(_sendable)]
MailAddress = Annotated[str, AfterValidator(_mail_address)]


class WebhookChannel(_Strict):
    """A JSON POST signed with HMAC-SHA256 (header `X-Toolrouter-Signature`)."""

    # `webhook`.
    type: Literal["webhook"]
    # The receiver, `http://` or `https://`; may use `${VAR}`.
    url: SendableUrl
    # The HMAC-SHA256 key the receiver verifies with; must be written as `${VAR}`.
    secret: str = Field(min_length=16)


class SlackChannel(_Strict):
    """A Slack-compatible incoming webhook: a readable message with a link to the inbox."""

    # `slack`.
    type: Literal["slack"]
    # The incoming webhook's URL (it is the credential); must be written as `${VAR}`.
    url: SendableUrl


class EmailChannel(_Strict):
    """Email over SMTP, plain text and HTML, with a link to the inbox."""

    # `email`.
    type: Literal["email"]
    # The SMTP server.
    host: str = Field(pattern=r"^[^\s/@]+$")
    # Its port.
    port: int = Field(default=25, ge=1, le=65535)
    # The sender's address.
    from_addr: MailAddress
    # The recipients' addresses, at least one.
    to: tuple[MailAddress, ...] = Field(min_length=1)
    # Upgrade the connection with STARTTLS before anything is sent.
    starttls: bool = False
    # The SMTP login's user; unset: no login.
    username: str | None = None
    # The SMTP login's password; must be written as `${VAR}`.
    password: str | None = None


Channel = Annotated[WebhookChannel | SlackChannel | EmailChannel, Field(discriminator="type")]
# Fields holding a credential: refused unless written as one ``${VAR}``.
SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    ChannelType.WEBHOOK: ("secret",),
    ChannelType.SLACK: ("url",),
    ChannelType.EMAIL: ("password",),
}


class EscalateTo(_Strict):
    """Who is told, once, of a request still undecided after `escalate_after_s`."""

    # Approver roles whose channels (`notifications.roles`) are told.
    roles: tuple[str, ...] = ()
    # Key names whose channels (`notifications.keys`) are told.
    keys: tuple[str, ...] = ()


class Notifications(_Strict):
    """Who hears about approval requests: when one is pending, decided or expired."""

    # Channels by name (1-64 of `A-Z a-z 0-9 _ . -`), each a mapping with a `type`:
    # `webhook`, `slack` or `email` (the tables below).
    channels: dict[str, Channel] = Field(default_factory=dict)
    # Approver role -> the channels its requests are announced on (a tool's `approvers`
    # pick the roles).
    roles: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # Key name -> the channels that reach that key's holder, for a tool's `escalate_to.keys`.
    keys: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    def escalation_channels(self, group: EscalateTo) -> list[str]:
        """The channels an escalation to ``group`` is told on: its roles', then its keys',
        each once."""
        names = [name for role in group.roles for name in self.roles.get(role, ())]
        names += [name for key in group.keys for name in self.keys.get(key, ())]
        return list(dict.fromkeys(names))

    def channels_for(self, approvers: Sequence[str], tool_notify: Sequence[str]) -> list[str]:
        """The channels a request is announced on: the tool's own, then its approver
        roles', each once."""
        names = [*tool_notify, *(name for role in approvers for name in self.roles.get(role, ()))]
        return list(dict.fromkeys(names))


def parse_notifications(
    raw: Any, env: Mapping[str, str], *, file: str, interpolate: Any, used: dict[str, str]
) -> Notifications:
    """The ``notifications`` table, its secrets checked before interpolation."""
    if raw is None:
        return Notifications()
    if not isinstance(raw, dict):
        raise ConfigError(
            "notifications must be a mapping of 'channels', 'roles' and 'keys'", file=file
        )
    if unknown := set(raw) - {"channels", "roles", "keys"}:
        raise ConfigError(f"notifications.{sorted(map(str, unknown))[0]}: unknown key", file=file)
    channels = raw.get("channels") or {}
    if not isinstance(channels, dict):
        raise ConfigError("notifications.channels must be a mapping", file=file)
    for name, channel in channels.items():
        where = f"notifications.channels.{name}"
        if not isinstance(name, str) or not CHANNEL_NAME_RE.fullmatch(name):
            raise ConfigError(f"{where}: channel names are 1-64 of A-Z a-z 0-9 _ . -", file=file)
        if not isinstance(channel, dict):
            raise ConfigError(f"{where}: must be a mapping with a 'type'", file=file)
        for field in SECRET_FIELDS.get(str(channel.get("type")), ()):
            value = channel.get(field)
            if value is not None and not (isinstance(value, str) and _ONLY_VAR_RE.fullmatch(value)):
                raise ConfigError(f"{where}.{field}: must be written as ${{VAR}}", file=file)
    interpolated = interpolate(raw, env, file=file, tool=None, used=used, at="notifications")
    try:
        parsed = Notifications.model_validate(interpolated)
    except ValidationError as exc:
        first = exc.errors()[0]
        # The discriminated union names the type in the path; the field is what helps.
        loc = [str(part) for part in first["loc"] if part not in set(ChannelType)]
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"notifications.{'.'.join(loc)}: {message}", file=file) from None
    for table, entries in (("roles", parsed.roles), ("keys", parsed.keys)):
        for owner, names in entries.items():
            # Role names were never checked here; refusing odd ones now would break configs.
            if table == "keys" and not _sane_name(table, owner):
                raise ConfigError(f"notifications.{table}: bad name {owner!r}", file=file)
            for name in names:
                if name not in parsed.channels:
                    raise ConfigError(
                        f"notifications.{table}.{owner}: unknown channel {name}", file=file
                    )
    return parsed


def _sane_name(table: str, name: str) -> bool:
    """Role names as channel names; key names as keys take them (``router.auth.keys``)."""
    if table == "roles":
        return bool(CHANNEL_NAME_RE.fullmatch(name))
    return is_key_name(name)


def check_tool_channels(
    tool: str, notify: Sequence[str], notifications: Notifications, *, file: str
) -> None:
    """A tool's ``notify`` names only channels that exist."""
    for name in notify:
        if name not in notifications.channels:
            raise ConfigError(f"notify: unknown channel {name}", file=file, tool=tool)


class Escalating(Protocol):
    """What ``check_escalation`` reads of a tool spec (not imported: it imports this)."""

    @property
    def name(self) -> str: ...
    @property
    def escalate_after_s(self) -> float | None: ...
    @property
    def escalate_to(self) -> EscalateTo | None: ...
    @property
    def approval_timeout_s(self) -> float: ...


def check_escalation(spec: Escalating, notifications: Notifications, *, file: str) -> None:
    """``escalate_after_s`` and ``escalate_to`` come together, fire before expiry, and every
    role and key named has channels: an escalation always has someone to tell."""
    tool, after_s, group = spec.name, spec.escalate_after_s, spec.escalate_to
    timeout_s = spec.approval_timeout_s
    if after_s is None or group is None:
        if after_s is not None or group is not None:
            raise ConfigError(
                "escalate_after_s and escalate_to must be set together", file=file, tool=tool
            )
        return
    if after_s >= timeout_s:
        raise ConfigError(
            "escalate_after_s must be less than approval_timeout_s", file=file, tool=tool
        )
    if not group.roles and not group.keys:
        raise ConfigError("escalate_to: name at least one role or key", file=file, tool=tool)
    for table, names, configured in (
        ("roles", group.roles, notifications.roles),
        ("keys", group.keys, notifications.keys),
    ):
        for name in names:
            if not _sane_name(table, name):
                raise ConfigError(f"escalate_to.{table}: bad name {name!r}", file=file, tool=tool)
            if not configured.get(name):
                raise ConfigError(
                    f"escalate_to.{table}: {name} has no channels in notifications.{table}",
                    file=file,
                    tool=tool,
                )
