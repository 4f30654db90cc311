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
