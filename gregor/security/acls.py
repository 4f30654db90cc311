"""ACLs as Kafka writes them: bindings (a resource pattern and an access control entry),
filters over them, and the checks Kafka's controller makes before storing one. Pure.

    binding = AclBinding(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
    AclFilter(resource_type=ANY, pattern_type=MATCH, name="orders").matches(binding)   # True

Codes are Kafka's (ResourceType, PatternType, AclOperation, AclPermissionType), as they travel
in CreateAcls / DescribeAcls / DeleteAcls and in AccessControlEntryRecord:

    resource type    0 UNKNOWN 1 ANY 2 TOPIC 3 GROUP 4 CLUSTER 5 TRANSACTIONAL_ID
                     6 DELEGATION_TOKEN 7 USER
    pattern type     0 UNKNOWN 1 ANY 2 MATCH 3 LITERAL 4 PREFIXED
    operation        0 UNKNOWN 1 ANY 2 ALL 3 READ 4 WRITE 5 CREATE 6 DELETE 7 ALTER 8 DESCRIBE
                     9 CLUSTER_ACTION 10 DESCRIBE_CONFIGS 11 ALTER_CONFIGS 12 IDEMPOTENT_WRITE
                     13 CREATE_TOKENS 14 DESCRIBE_TOKENS
    permission       0 UNKNOWN 1 ANY 2 DENY 3 ALLOW

A filter's MATCH pattern type selects every binding that would apply to the named resource: the
literal one of that name, the literal wildcard `*`, and every prefixed one the name starts with
(Kafka's ResourcePatternFilter.matches). ANY selects every pattern type with exactly that name.
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

UNKNOWN, ANY = 0, 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14
DENY, ALLOW = 2, 3

WILDCARD = "*"  # a literal resource name matching every name, and the host matching any host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource

RESOURCE_TYPES = {
    "UNKNOWN": UNKNOWN,
    "ANY": ANY,
    "TOPIC": TOPIC,
    "GROUP": GROUP,
    "CLUSTER": CLUSTER,
    "TRANSACTIONAL_ID": TRANSACTIONAL_ID,
    "DELEGATION_TOKEN": DELEGATION_TOKEN,
    "USER": USER,
}
PATTERN_TYPES = {"UNKNOWN": UNKNOWN, "ANY": ANY, "MATCH": MATCH, "LITERAL": LITERAL, "PREFIXED": 4}
OPERATIONS = {
    "UNKNOWN": UNKNOWN,
    "ANY": ANY,
    "ALL": ALL,
    "READ": READ,
    "WRITE": WRITE,
    "CREATE": CREATE,
    "DELETE": DELETE,
    "ALTER": ALTER,
    "DESCRIBE": DESCRIBE,
    "CLUSTER_ACTION": CLUSTER_ACTION,
    "DESCRIBE_CONFIGS": DESCRIBE_CONFIGS,
    "ALTER_CONFIGS": ALTER_CONFIGS,
    "IDEMPOTENT_WRITE": IDEMPOTENT_WRITE,
    "CREATE_TOKENS": CREATE_TOKENS,
    "DESCRIBE_TOKENS": DESCRIBE_TOKENS,
}
PERMISSIONS = {"UNKNOWN": UNKNOWN, "ANY": ANY, "DENY": DENY, "ALLOW": ALLOW}


def _names(table: dict[str, int]) -> dict[int, str]:
    return {code: name for name, code in table.items()}


RESOURCE_TYPE_NAMES = _names(RESOURCE_TYPES)
PATTERN_TYPE_NAMES = _names(PATTERN_TYPES)
OPERATION_NAMES = _names(OPERATIONS)
PERMISSION_NAMES = _names(PERMISSIONS)

# What each resource type can be asked (Kafka's AclEntry.supportedOperations): the operations an
# `authorized_operations` bit field reports.
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (
        CREATE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
        ALTER,
        DESCRIBE,
    ),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
    DELEGATION_TOKEN: (DESCRIBE,),
    USER: (CREATE_TOKENS, DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) to which
    resources (type, name, pattern type)."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def __str__(self) -> str:
        return (
            f"(resourceType={RESOURCE_TYPE_NAMES.get(self.resource_type, '?')}, "
            f"name={self.name}, patternType={PATTERN_TYPE_NAMES.get(self.pattern_type, '?')}, "
            f"principal={self.principal}, host={self.host}, "
            f"operation={OPERATION_NAMES.get(self.operation, '?')}, "
            f"permissionType={PERMISSION_NAMES.get(self.permission, '?')})"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (a name, principal or host) and ANY match everything."""

    resource_type: int = ANY
    name: str | None = None
    pattern_type: int = ANY
    principal: str | None = None
    host: str | None = None
    operation: int = ANY
    permission: int = ANY

    def is_unknown(self) -> bool:
        return UNKNOWN in (self.resource_type, self.pattern_type, self.operation, self.permission)

    def matches(self, acl: AclBinding) -> bool:
        return (
            self.matches_resource(acl)
            and (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation == ANY or self.operation == acl.operation)
            and (self.permission == ANY or self.permission == acl.permission)
        )

    def matches_resource(self, acl: AclBinding) -> bool:
        if self.resource_type != ANY and self.resource_type != acl.resource_type:
            return False
        if self.pattern_type not in (ANY, MATCH) and self.pattern_type != acl.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (ANY, acl.pattern_type):
            return self.name == acl.name
        if acl.pattern_type == LITERAL:  # MATCH
            return self.name == acl.name or acl.name == WILDCARD
        return acl.pattern_type == PREFIXED and self.name.startswith(acl.name)


def invalid(message: str) -> KafkaError:
    return KafkaError(errors.INVALID_REQUEST, message)


def check_new_acl(acl: AclBinding) -> None:
    """INVALID_REQUEST unless `acl` may be stored (Kafka's AclApis and AclControlManager)."""
    if acl.resource_type in (UNKNOWN, ANY) or acl.resource_type not in RESOURCE_TYPE_NAMES:
        raise invalid(f"Invalid resourceType {RESOURCE_TYPE_NAMES.get(acl.resource_type, '?')}")
    if acl.pattern_type not in (LITERAL, PREFIXED):
        raise invalid(f"Invalid patternType {PATTERN_TYPE_NAMES.get(acl.pattern_type, '?')}")
    if acl.operation in (UNKNOWN, ANY) or acl.operation not in OPERATION_NAMES:
        raise invalid(f"Invalid operation {OPERATION_NAMES.get(acl.operation, '?')}")
    if acl.permission not in (DENY, ALLOW):
        raise invalid(f"Invalid permissionType {PERMISSION_NAMES.get(acl.permission, '?')}")
    if not acl.name:
        raise invalid("Invalid empty resource name")
    if acl.resource_type == CLUSTER and acl.name != CLUSTER_NAME:
        raise invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    principal_type, sep, principal_name = acl.principal.partition(":")
    if not sep or not principal_type or not principal_name:
        raise invalid(f"Invalid principal {acl.principal!r}: expected Type:name (User:alice)")
    if not acl.host:
        raise invalid("Invalid empty host")


def check_filter(f: AclFilter) -> None:
    """INVALID_REQUEST for a filter with an UNKNOWN element (Kafka's validateFilter)."""
    if f.resource_type == UNKNOWN or f.pattern_type == UNKNOWN:
        raise invalid("Unknown patternFilter.")
    if f.operation == UNKNOWN or f.permission == UNKNOWN:
        raise invalid("Unknown entryFilter.")
    known = (RESOURCE_TYPE_NAMES, PATTERN_TYPE_NAMES, OPERATION_NAMES, PERMISSION_NAMES)
    values = (f.resource_type, f.pattern_type, f.operation, f.permission)
    if any(v not in names for v, names in zip(values, known, strict=True)):
        raise invalid("Unknown patternFilter.")
