import pytest

from gregor.security.principal import ANONYMOUS, KafkaPrincipal, principal_of, set_principal

pytestmark = pytest.mark.unit


def test_a_principal_reads_and_writes_as_kafka_writes_it() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert alice == KafkaPrincipal("User", "alice")
    assert str(alice) == "User:alice"
    assert KafkaPrincipal.parse("User:CN=a,O=b").name == "CN=a,O=b"


@pytest.mark.parametrize("text", ["alice", ":alice", "User:", ""])
def test_a_principal_without_a_type_or_name_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        KafkaPrincipal.parse(text)


def test_a_connection_is_anonymous_until_it_authenticates() -> None:
    connection: dict[str, object] = {}
    assert principal_of(connection) == ANONYMOUS
    set_principal(connection, KafkaPrincipal("User", "bob"))
    assert str(principal_of(connection)) == "User:bob"


def test_a_principal_travels_in_an_envelope_as_kafkas_default_principal_data() -> None:
    from gregor.security.principal_data import deserialize, serialize

    alice = KafkaPrincipal("User", "CN=alice,O=ex")
    data = serialize(alice)
    # version 0, compact strings "User" and the name, not token-authenticated, no tags
    assert data == b"\x00\x00\x05User\x0eCN=alice,O=ex\x00\x00"
    assert deserialize(data) == alice
    for bad in (b"", b"\x00\x01\x05User\x02a\x00\x00", data[:-3]):
        with pytest.raises(ValueError):
            deserialize(bad)
