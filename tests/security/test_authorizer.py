"""The authorization decision, table by table (Kafka's StandardAuthorizer rules)."""

import pytest

from gregor.protocol.errors import KafkaError
from gregor.security.acls import (
    ALL,
    ALLOW,
    ALTER_CONFIGS,
    ANY,
    CLUSTER,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    LITERAL,
    MATCH,
    PREFIXED,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    UNKNOWN,
    WRITE,
    AclBinding,
    AclFilter,
    check_filter,
    check_new_acl,
)
from gregor.security.authorizer import Authorizer, all_operations

pytestmark = pytest.mark.unit

ALICE, BOB = "User:alice", "User:bob"


def acl(rtype, name, pattern, principal, op, perm, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


BASE = [
    acl(TOPIC, "orders", LITERAL, ALICE, READ, ALLOW),
    acl(TOPIC, "orders", LITERAL, ALICE, WRITE, DENY),
    acl(TOPIC, "pay-", PREFIXED, ALICE, WRITE, ALLOW),
    acl(TOPIC, "pay-secret", PREFIXED, ALICE, ALL, DENY),
    acl(TOPIC, "*", LITERAL, "User:*", DESCRIBE, ALLOW),
    acl(TOPIC, "hosted", LITERAL, BOB, READ, ALLOW, host="10.0.0.1"),
    acl(GROUP, "g1", LITERAL, ALICE, READ, ALLOW),
    acl(GROUP, "g1", LITERAL, BOB, READ, DENY),
    acl(GROUP, "cfg", LITERAL, ALICE, ALTER_CONFIGS, ALLOW),
    acl(CLUSTER, "kafka-cluster", LITERAL, ALICE, IDEMPOTENT_WRITE, ALLOW),
    acl(TRANSACTIONAL_ID, "tx", PREFIXED, "User:*", WRITE, ALLOW),
    acl(TOPIC, "deny-read", LITERAL, ALICE, READ, DENY),
    acl(TOPIC, "deny-read", LITERAL, ALICE, ALL, ALLOW),
]

# (principal, host, operation, resource type, name, expected)
DECISIONS = [
    (ALICE, "1.2.3.4", READ, TOPIC, "orders", True),  # literal allow
    (ALICE, "1.2.3.4", WRITE, TOPIC, "orders", False),  # literal deny
    (ALICE, "1.2.3.4", DESCRIBE, TOPIC, "orders", True),  # READ implies DESCRIBE
    (BOB, "1.2.3.4", READ, TOPIC, "orders", False),  # ACLs exist, none for bob
    (BOB, "1.2.3.4", DESCRIBE, TOPIC, "orders", True),  # wildcard principal and name
    (ALICE, "1.2.3.4", WRITE, TOPIC, "pay-in", True),  # prefixed allow
    (ALICE, "1.2.3.4", WRITE, TOPIC, "pay-secret-x", False),  # longer prefix denies ALL
    (ALICE, "1.2.3.4", READ, TOPIC, "pay-in", False),  # WRITE does not imply READ
    (ALICE, "1.2.3.4", WRITE, TOPIC, "pay", False),  # shorter than the prefix
    (BOB, "10.0.0.1", READ, TOPIC, "hosted", True),  # host matches
    (BOB, "10.0.0.2", READ, TOPIC, "hosted", False),  # host does not
    (ALICE, "1.2.3.4", READ, GROUP, "g1", True),
    (BOB, "1.2.3.4", READ, GROUP, "g1", False),
    (BOB, "1.2.3.4", DESCRIBE, GROUP, "g1", False),  # a DENY of READ does not deny DESCRIBE,
    # but nothing allows it either and g1 has ACLs
    (ALICE, "1.2.3.4", DESCRIBE_CONFIGS, GROUP, "cfg", True),  # ALTER_CONFIGS implies it
    (ALICE, "1.2.3.4", DESCRIBE, GROUP, "cfg", False),  # but not DESCRIBE
    (ALICE, "1.2.3.4", IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster", True),
    (BOB, "1.2.3.4", IDEMPOTENT_WRITE, CLUSTER, "kafka-cluster", False),
    (BOB, "1.2.3.4", WRITE, TRANSACTIONAL_ID, "tx-1", True),
    (BOB, "1.2.3.4", DESCRIBE, TRANSACTIONAL_ID, "tx-1", True),  # WRITE implies DESCRIBE
    (ALICE, "1.2.3.4", READ, TOPIC, "deny-read", False),  # DENY wins over ALL ALLOW
    (ALICE, "1.2.3.4", WRITE, TOPIC, "deny-read", True),
    (ALICE, "1.2.3.4", READ, TOPIC, "no-acls", False),  # no ACL: default deny
    (ALICE, "1.2.3.4", DESCRIBE, TOPIC, "no-acls", True),  # wildcard covers every name
    (ALICE, "1.2.3.4", READ, GROUP, "no-acls", False),
]


@pytest.mark.parametrize(("principal", "host", "op", "rtype", "name", "expected"), DECISIONS)
def test_decisions(principal, host, op, rtype, name, expected) -> None:
    authz = Authorizer(BASE)
    assert authz.decide(principal, host, op, rtype, name) is expected
    assert authz.authorize(principal, host, op, rtype, name) is expected  # memoised path
    assert authz.authorize(principal, host, op, rtype, name) is expected


@pytest.mark.parametrize(
    ("acls", "allow_if_no_acl", "expected"),
    [
        ([], False, False),
        ([], True, True),
        # an ACL on the resource for someone else: no default, deny
        ([acl(GROUP, "g", LITERAL, BOB, READ, ALLOW)], True, False),
        # an ACL on another resource only: the default applies
        ([acl(GROUP, "other", LITERAL, BOB, READ, ALLOW)], True, True),
        # a prefixed ACL covering the name counts as an ACL on it
        ([acl(GROUP, "g", PREFIXED, BOB, READ, ALLOW)], True, False),
    ],
)
def test_allow_everyone_if_no_acl_found(acls, allow_if_no_acl, expected) -> None:
    authz = Authorizer(acls, allow_if_no_acl=allow_if_no_acl)
    assert authz.decide(ALICE, "h", READ, GROUP, "g") is expected


def test_super_users_may_do_anything_even_when_denied() -> None:
    acls = [acl(TOPIC, "t", LITERAL, "User:admin", ALL, DENY)]
    authz = Authorizer(acls, super_users={"User:admin"})
    assert authz.decide("User:admin", "h", DELETE, TOPIC, "t")
    assert not authz.decide(ALICE, "h", DELETE, TOPIC, "t")


def test_authorized_operations_is_a_bit_per_allowed_operation() -> None:
    authz = Authorizer([acl(TOPIC, "t", LITERAL, ALICE, WRITE, ALLOW)])
    bits = authz.authorized_operations(ALICE, "h", TOPIC, "t")
    assert bits == (1 << WRITE) | (1 << DESCRIBE)
    assert all_operations(GROUP) == (1 << READ) | (1 << DESCRIBE) | (1 << DELETE)
    assert Authorizer(super_users={ALICE}).authorized_operations(
        ALICE, "h", CLUSTER, "kafka-cluster"
    ) == all_operations(CLUSTER)


FILTER_CASES = [
    # (filter, names of BASE bindings on TOPIC it selects)
    (AclFilter(TOPIC, "orders", LITERAL), {"orders"}),
    (AclFilter(TOPIC, "orders", MATCH), {"orders", "*"}),
    (AclFilter(TOPIC, "pay-secret-1", MATCH), {"pay-", "pay-secret", "*"}),
    (AclFilter(TOPIC, "pay-", ANY), {"pay-"}),
    (AclFilter(TOPIC, None, PREFIXED), {"pay-", "pay-secret"}),
    (AclFilter(TOPIC, "orders", MATCH, principal=BOB), set()),
    (AclFilter(TOPIC, "orders", LITERAL, operation=WRITE), {"orders"}),
    (AclFilter(TOPIC, None, ANY, host="10.0.0.1"), {"hosted"}),
]


@pytest.mark.parametrize(("f", "names"), FILTER_CASES)
def test_filters(f: AclFilter, names: set[str]) -> None:
    assert {a.name for a in BASE if f.matches(a) and a.resource_type == TOPIC} == names


def test_any_filter_matches_everything() -> None:
    assert all(AclFilter().matches(a) for a in BASE)


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl(ANY, "t", LITERAL, ALICE, READ, ALLOW), "Invalid resourceType"),
        (acl(TOPIC, "t", MATCH, ALICE, READ, ALLOW), "Invalid patternType"),
        (acl(TOPIC, "t", LITERAL, ALICE, ANY, ALLOW), "Invalid operation"),
        (acl(TOPIC, "t", LITERAL, ALICE, READ, ANY), "Invalid permissionType"),
        (acl(TOPIC, "", LITERAL, ALICE, READ, ALLOW), "empty resource name"),
        (acl(CLUSTER, "c", LITERAL, ALICE, CREATE, ALLOW), "kafka-cluster"),
        (acl(TOPIC, "t", LITERAL, "alice", READ, ALLOW), "Invalid principal"),
    ],
)
def test_bad_acls_are_invalid_requests(binding: AclBinding, message: str) -> None:
    with pytest.raises(KafkaError, match=message) as info:
        check_new_acl(binding)
    assert info.value.code == 42  # INVALID_REQUEST


def test_filters_with_unknown_elements_are_invalid() -> None:
    check_filter(AclFilter())
    for f in (AclFilter(resource_type=UNKNOWN), AclFilter(operation=UNKNOWN)):
        with pytest.raises(KafkaError):
            check_filter(f)


@pytest.mark.parametrize(
    ("acls", "allow_if_no_acl", "expected"),
    [
        ([], False, False),
        ([], True, True),  # a name with no ACL is allowed
        ([acl(TOPIC, "t", LITERAL, ALICE, WRITE, ALLOW)], False, True),
        ([acl(TOPIC, "t-", PREFIXED, "User:*", WRITE, ALLOW)], False, True),
        ([acl(TOPIC, "t", LITERAL, BOB, WRITE, ALLOW)], False, False),  # someone else's
        ([acl(TOPIC, "t", LITERAL, ALICE, READ, ALLOW)], False, False),  # another operation
        (
            [
                acl(TOPIC, "t", LITERAL, ALICE, WRITE, ALLOW),
                acl(TOPIC, "*", LITERAL, ALICE, WRITE, DENY),
            ],
            False,
            False,
        ),  # a DENY of every name
        (
            [
                acl(TOPIC, "t-1", LITERAL, ALICE, WRITE, ALLOW),
                acl(TOPIC, "t-", PREFIXED, ALICE, WRITE, DENY),
            ],
            False,
            False,
        ),  # the only ALLOW is covered by a prefixed DENY
    ],
)
def test_authorize_any_resource_of_a_type(acls, allow_if_no_acl, expected) -> None:
    authz = Authorizer(acls, allow_if_no_acl=allow_if_no_acl)
    assert authz.authorize_any(ALICE, "h", WRITE, TOPIC) is expected
