"""Who is calling: a key's name (its identity in the audit log) and its roles."""

from __future__ import annotations

from dataclasses import dataclass

from ..status import NON_APPROVER_ROLES, Role


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's name (the identity in the audit log) and its roles."""

    name: str
    roles: frozenset[str]

    def has(self, *roles: str) -> bool:
        return any(role in self.roles for role in roles)

    @property
    def is_operator(self) -> bool:
        return self.has(Role.OPERATOR, Role.ADMIN)

    @property
    def is_approver(self) -> bool:
        """Holds an approver role: may decide the requests of tools naming one of them."""
        return bool(self.roles - NON_APPROVER_ROLES)
