"""The authorization decision, as Kafka's StandardAuthorizer makes it: a pure function of
(principal, host, operation, resource, ACL set, super.users, allow.everyone.if.no.acl.found).

    authz = Authorizer(acls, super_users={"User:admin"}, allow_if_no_acl=False)
    authz.authorize("User:alice", "10.0.0.7", READ, TOPIC, "orders")   # True / False

The rules, in order (StandardAuthorizerData.authorize / findAclRule / findResult):

    1. a super user may do anything
    2. the ACLs that apply to the resource are those of its type whose pattern covers its name:
       LITERAL of exactly that name, LITERAL `*`, and PREFIXED of any prefix of the name
    3. among them, those whose principal is the caller's or `User:*`, whose host is the
       caller's or `*`, and whose operation is the one asked, or ALL, or one that implies it
       (ALLOW only: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
       DESCRIBE_CONFIGS; a DENY of READ does not deny DESCRIBE)
    4. any DENY among them: denied; else any ALLOW: allowed
    5. none, but the resource has ACLs (for anybody, any operation): denied
    6. the resource has no ACL at all: `allow.everyone.if.no.acl.found` (false by default)

The index: ACLs grouped by (resource type, name) for LITERAL and for PREFIXED, and for each
resource type the lengths of its prefixes, so a check looks up the literal name, `*`, and one
slice of the name per prefix length in use (not one per character). Decisions are memoised per
(principal, host, operation, type, name) until the ACL set changes; the memo is bounded
(cleared at MEMO_LIMIT entries). bench/authorizer_bench.py measures both paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from gregor.security.acls import (
    ALL,
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    LITERAL,
    READ,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    WRITE,
    AclBinding,
)

AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MEMO_LIMIT = 100_000
# Which ALLOW operations grant an asked operation besides itself and ALL.
_IMPLIED_BY = {
    DESCRIBE: frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER}),
    DESCRIBE_CONFIGS: frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS}),
}
# Kafka's authorized_operations when the caller did not ask for them.
NOT_ASKED = -(2**31)


class _Entry(NamedTuple):
    principal: str
    host: str
    operation: int
    permission: int


# One resource section: its entries by principal (so a check reads only the caller's and
# `User:*`'s, not every principal's).
Section = dict[str, list[_Entry]]


def _decide(section: Section, principal: str, host: str, operation: int) -> int:
    """DENY, ALLOW or 0 (nothing matched) over one resource section."""
    found = 0
    for who in (principal, WILDCARD_PRINCIPAL):
        entries = section.get(who)
        if entries:
            result = _decide_entries(entries, host, operation)
            if result == DENY:
                return DENY
            found = found or result
    return found


def _decide_entries(entries: list[_Entry], host: str, operation: int) -> int:
    granting = _IMPLIED_BY.get(operation)
    found = 0
    for e in entries:
        if e.host != WILDCARD and e.host != host:
            continue
        op = e.operation
        if op != ALL and op != operation:
            if e.permission == DENY or granting is None or op not in granting:
                continue
        if e.permission == DENY:
            return DENY
        found = ALLOW
    return found


class Authorizer:
    def __init__(
        self,
        acls: Iterable[AclBinding] = (),
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[int, str], Section] = {}
        self._prefixed: dict[tuple[int, str], Section] = {}
        self._prefix_lengths: dict[int, list[int]] = {}
        self._memo: dict[tuple[str, str, int, int, str], bool] = {}
        self.count = 0
        for acl in acls:
            self._add(acl)
        for rtype, lengths in self._prefix_lengths.items():
            self._prefix_lengths[rtype] = sorted(set(lengths))

    def _add(self, acl: AclBinding) -> None:
        entry = _Entry(acl.principal, acl.host, acl.operation, acl.permission)
        key = (acl.resource_type, acl.name)
        index = self._literal if acl.pattern_type == LITERAL else self._prefixed
        index.setdefault(key, {}).setdefault(acl.principal, []).append(entry)
        if acl.pattern_type != LITERAL:
            self._prefix_lengths.setdefault(acl.resource_type, []).append(len(acl.name))
        self.count += 1

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """May `principal` from `host` do `operation` on the resource? (The module docstring.)"""
        key = (principal, host, operation, resource_type, name)
        memo = self._memo
        decision = memo.get(key)
        if decision is None:
            decision = self.decide(principal, host, operation, resource_type, name)
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key] = decision
        return decision

    def decide(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """`authorize` without the memo."""
        if principal in self.super_users:
            return True
        has_acls = False
        allowed = False
        for section in self._sections(resource_type, name):
            has_acls = True
            result = _decide(section, principal, host, operation)
            if result == DENY:
                return False
            allowed = allowed or result == ALLOW
        if allowed:
            return True
        return not has_acls and self.allow_if_no_acl

    def _sections(self, resource_type: int, name: str) -> list[Section]:
        out = []
        literal = self._literal
        section = literal.get((resource_type, name))
        if section:
            out.append(section)
        if name != WILDCARD:
            section = literal.get((resource_type, WILDCARD))
            if section:
                out.append(section)
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for n in lengths:
                if n > len(name):
                    break
                section = prefixed.get((resource_type, name[:n]))
                if section:
                    out.append(section)
        return out

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """May the principal do `operation` on some resource of the type (Kafka's
        authorizeByResourceType, as InitProducerId asks of an idempotent producer: WRITE on
        any topic)? Allowed when a name with no ACL would be (super users, the default), else
        when some ALLOW of that operation (or ALL) names a resource no DENY covers; a DENY on
        the literal `*` denies."""
        key = (principal, host, -operation, resource_type, "")
        decision = self._memo.get(key)
        if decision is None:
            decision = self._decide_any(principal, host, operation, resource_type)
            self._memo[key] = decision
        return decision

    def _decide_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        if self.decide(principal, host, operation, resource_type, "hardcode"):
            return True
        found: dict[tuple[bool, int], set[str]] = {}
        for literal, index in ((True, self._literal), (False, self._prefixed)):
            for (rtype, name), section in index.items():
                if rtype != resource_type:
                    continue
                for who in (principal, WILDCARD_PRINCIPAL):
                    for e in section.get(who, ()):
                        if e.host not in (WILDCARD, host) or e.operation not in (ALL, operation):
                            continue
                        found.setdefault((literal, e.permission), set()).add(name)
        deny_literal = found.get((True, DENY), set())
        deny_prefix = found.get((False, DENY), set())
        if WILDCARD in deny_literal:
            return False
        for name in found.get((True, ALLOW), ()):
            if name not in deny_literal and not any(name.startswith(p) for p in deny_prefix):
                return True
        return any(
            not any(name.startswith(p) for p in deny_prefix)
            for name in found.get((False, ALLOW), ())
        )

    def authorized_operations(
        self, principal: str, host: str, resource_type: int, name: str
    ) -> int:
        """Kafka's bit field (1 << operation code) of the supported operations allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def all_operations(resource_type: int) -> int:
    """The bit field of every supported operation: what Kafka reports with no authorizer."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        bits |= 1 << op
    return bits


class LiveAuthorizer:
    """The authorizer a node runs: an `Authorizer` over the ACLs its metadata image holds now,
    rebuilt when that set changes (a new mapping object: images share unchanged mappings, so
    every other metadata change costs one identity test).

        live = LiveAuthorizer(lambda: store.image.acls, super_users, allow_if_no_acl)
        live.authorize("User:alice", host, READ, TOPIC, "orders")
    """

    def __init__(
        self,
        acls: Callable[[], Mapping[Any, AclBinding]],
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self._source = acls
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._seen: Mapping[Any, AclBinding] | None = None
        self._current = Authorizer((), self.super_users, allow_if_no_acl)

    def current(self) -> Authorizer:
        acls = self._source()
        if acls is not self._seen:
            self._current = Authorizer(acls.values(), self.super_users, self.allow_if_no_acl)
            self._seen = acls
        return self._current

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        return self.current().authorize(principal, host, operation, resource_type, name)

    def acls(self) -> list[AclBinding]:
        return list(self._source().values())


def parse_super_users(value: str) -> list[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:ops`)."""
    return [p.strip() for p in value.split(";") if p.strip()]


def live_authorizer(
    config: Mapping[str, str], acls: Callable[[], Mapping[Any, AclBinding]]
) -> LiveAuthorizer | None:
    """The node's authorizer from its static config; None when `authorizer.class.name` is
    empty (every request is allowed, and the ACL APIs answer SECURITY_DISABLED, as Kafka)."""
    if not config.get("authorizer.class.name", "").strip():
        return None
    allow = config.get("allow.everyone.if.no.acl.found", "false").strip().lower() == "true"
    return LiveAuthorizer(acls, parse_super_users(config.get("super.users", "")), allow)
