"""The archive's manifest: ``manifest.jsonl``, one signed JSON line per segment.

A valid line is a JSON object naming its checkpoint (``through_seq``), the segment's last
chain hash and its file digest, signed with the deployment's key. Reading the file never
raises on what someone with the archive directory can write: each line that is not such
an object comes back as a problem naming its line number, for ``verify`` to report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..canonical import canonical_json
from ..files import private_file
from ..trust.keyring import KeyRing, Purpose

NAME = "manifest.jsonl"

# What verify compares with a checkpoint: a line without these cannot vouch for one.
FIELDS: dict[str, type] = {"through_seq": int, "last_hash": str, "sha256": str}


@dataclass(frozen=True, slots=True)
class Line:
    """One well-formed manifest line and where it is in the file (counted from 1)."""

    number: int
    entry: dict[str, Any]

    @property
    def through_seq(self) -> int:
        seq: int = self.entry["through_seq"]
        return seq

    def describe(self) -> str:
        return f"manifest line {self.number} (through seq {self.through_seq})"


def line_text(entry: dict[str, Any], keyring: KeyRing) -> str:
    """One manifest line: ``entry`` with its signature."""
    body = _signed_part(entry)
    return json.dumps(
        {**body, "mac": keyring.sign(Purpose.AUDIT_HEAD, canonical_json(body))}, sort_keys=True
    )


def verifies(entry: dict[str, Any], keyring: KeyRing) -> bool:
    body = _signed_part(entry)
    try:
        text = canonical_json(body)
    except ValueError:  # NaN or an infinite number: never something the key signed
        return False
    return keyring.verify(Purpose.AUDIT_HEAD, text, entry.get("mac"))


def _signed_part(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "mac"}


def append(archive_dir: Path, entry: dict[str, Any], keyring: KeyRing) -> None:
    """Add ``entry``, signed, to the manifest (made 0600 like the segments beside it)."""
    with private_file(archive_dir / NAME).open("a", encoding="utf-8") as manifest:
        manifest.write(line_text(entry, keyring) + "\n")


def read(archive_dir: Path) -> tuple[list[Line], list[str]]:
    """The manifest's well-formed lines, and a problem for each line that is not one."""
    path = archive_dir / NAME
    if not path.exists():
        return [], []
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [f"{NAME} cannot be read: {exc.strerror or exc}"]
    lines: list[Line] = []
    problems: list[str] = []
    # Split on newlines only, so numbers match what an editor or ``sed -n`` shows.
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        entry, problem = _parse(raw)
        if problem is not None:
            problems.append(f"manifest line {number} {problem}")
        else:
            lines.append(Line(number, entry))
    return lines, problems


def _parse(raw: bytes) -> tuple[dict[str, Any], str | None]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return {}, "is not UTF-8 text"
    except ValueError:
        return {}, "is not JSON"
    except RecursionError:
        return {}, "is nested too deeply to read"
    if not isinstance(value, dict):
        return {}, "is not a JSON object"
    missing = [name for name in FIELDS if name not in value]
    wrong = [
        name
        for name, kind in FIELDS.items()
        if name in value and (not isinstance(value[name], kind) or isinstance(value[name], bool))
    ]
    if missing or wrong:
        parts = [f"lacks {', '.join(missing)}"] if missing else []
        parts += [f"has {', '.join(wrong)} of the wrong type"] if wrong else []
        return {}, f"is incomplete: {'; '.join(parts)}"
    return value, None
