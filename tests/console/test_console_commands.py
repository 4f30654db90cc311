"""Starting the console: `gregor console` (one-line errors for an unreachable cluster or a
listen address it cannot take) and the console inside a node (`console.listener`,
read-only unless `console.read.only=false`), served beside the broker and stopped with it."""

from __future__ import annotations

import http.cookiejar
import re
import socket
import urllib.error
import urllib.parse
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.broker.console_driver import console_client
from gregor.security.listener_config import ListenerConfig
from tests.cli.cli_helpers import gregor, one_line_error
from tests.console.browser import console_process
from tests.console.conftest import make_topic
from tests.security.security_certs import make_pki

pytestmark = pytest.mark.client


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _post(url: str, form: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _console_url(broker: Broker) -> str:
    found = re.search(r"console on (http://\S+) \((read-only|writes allowed)\)", broker.read_log())
    assert found, "the node logs its console's URL"
    return found[1]


def test_gregor_console_errors_are_one_line():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    run = gregor("console", "-b", f"127.0.0.1:{port}", "--timeout", "2")
    one_line_error(run, f"gregor: cannot reach 127.0.0.1:{port} (connection refused)")
    run = gregor("console", "--listen", "nowhere")
    one_line_error(run, "gregor: --listen 'nowhere' is not HOST:PORT (e.g. http://127.0.0.1:8080)")


def test_gregor_console_refuses_a_port_in_use(kafka):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = gregor("console", "-b", kafka.bootstrap, "--listen", f"127.0.0.1:{port}")
    one_line_error(
        run, f"gregor: cannot listen on 127.0.0.1:{port} (Address already in use): change --listen"
    )


def test_a_nodes_own_console_is_read_only_by_default(name):
    with Broker(config={"console.listener": "http://127.0.0.1:0"}, log_level="INFO") as broker:
        make_topic(broker.bootstrap, name)
        url = _console_url(broker)
        status, page = _get(url + "/")
        assert status == 200 and 'id="broker-count">1<' in page and "read-only" in page
        status, page = _get(f"{url}/topics/{name}/messages")
        assert status == 200 and 'id="produce"' not in page
        assert _post(f"{url}/topics/{name}/messages", {"value": "x"}) == 403
        broker.stop()
        assert "shut down cleanly" in broker.read_log()
        with pytest.raises(OSError):
            urllib.request.urlopen(url + "/", timeout=5)


def test_a_nodes_console_writes_when_told(name):
    config = {"console.listener": "http://127.0.0.1:0", "console.read.only": "false"}
    with Broker(config=config, log_level="INFO") as broker:
        make_topic(broker.bootstrap, name)
        url = _console_url(broker)
        status, page = _get(f"{url}/topics/{name}/messages")
        assert status == 200 and 'id="produce"' in page and "writes allowed" in page
        token = re.search(r'name="token" value="([^"]+)"', page)[1]  # type: ignore[index]
        assert (
            _post(f"{url}/topics/{name}/messages", {"token": token, "value": "from the node"})
            == 200
        )
        status, page = _get(f"{url}/topics/{name}/messages")
        assert ">from the node</pre>" in page


def test_serve_refuses_a_console_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = gregor(
            "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
            "--set", f"console.listener=http://127.0.0.1:{port}",
        )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip().endswith(
        f"127.0.0.1:{port} is already in use: pick another port with console.listener "
        "(port 0 picks a free one), or stop what holds it"
    )
    run = gregor("serve", "--data-dir", str(tmp_path), "--set", "console.listener=ftp://x:1")
    assert run.returncode != 0 and "console.listener" in run.stderr


SASL_ALICE = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "alice-secret",
}
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def test_gregor_console_logs_in_with_the_command_configs_sasl_settings(tmp_path, name):
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }
    settings = "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
    good, bad = tmp_path / "alice.properties", tmp_path / "wrong.properties"
    good.write_text(settings + "sasl.password=alice-secret\n")
    bad.write_text(settings + "sasl.password=wrong\n")
    with Broker(config=config) as broker:
        run = gregor(
            "console", "-b", broker.bootstrap, "--command-config", str(bad), "--timeout", "5"
        )
        assert run.returncode == 1 and run.stderr.startswith(
            f"gregor: cannot connect to {broker.bootstrap}: "
        )
        assert "Traceback" not in run.stderr and "SASL" in run.stderr
        with console_process(
            broker.bootstrap, "--command-config", str(good), "--allow-writes"
        ) as url:
            status, page = _get(url + "/")
            assert status == 200 and 'id="broker-count">1<' in page
            # the quorum, asked with gregor's own codec, over SASL with the same settings
            assert 'id="quorum-leader">1<' in page
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, **SASL_ALICE})
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
            status, page = _get(f"{url}/topics/{name}/messages")
            assert status == 200
            token = re.search(r'name="token" value="([^"]+)"', page)[1]  # type: ignore[index]
            assert (
                _post(f"{url}/topics/{name}/messages", {"token": token, "value": "as alice"}) == 200
            )
            assert ">as alice</pre>" in _get(f"{url}/topics/{name}/messages")[1]


def _signed_in_pages(url: str, user: str, password: str) -> tuple[str, str, str]:
    """The node console's answers, as a browser with cookies sees them: where `/` sends a
    newcomer, the page after a wrong password, and `/` after signing in."""
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with browser.open(url + "/", timeout=30) as answer:  # redirected to /login
        first, form = answer.url, answer.read().decode()
    token = re.search(r'name="token" value="([^"]+)"', form)[1]  # type: ignore[index]

    def sign_in(secret: str) -> str:
        fields = {"token": token, "user": user, "password": secret, "mechanism": "PLAIN"}
        body = urllib.parse.urlencode(fields).encode()
        try:
            with browser.open(url + "/login", data=body, timeout=30) as answer:
                return answer.read().decode()
        except urllib.error.HTTPError as exc:
            return f"{exc.code} {exc.read().decode()}"

    refused = sign_in("wrong")
    return first, refused, sign_in(password)


def test_a_nodes_console_on_a_sasl_listener_signs_each_user_in():
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "console.listener": "http://127.0.0.1:0",
    }
    with Broker(config=config, log_level="INFO") as broker:
        assert "each user signs in with SASL credentials" in broker.read_log()
        assert "no credentials" not in broker.read_log()
        first, refused, page = _signed_in_pages(_console_url(broker), "alice", "alice-secret")
        assert first.endswith("/login")
        assert refused.startswith("401 ") and "the cluster refused the login" in refused
        assert 'id="signed-in">alice<' in page and 'id="broker-count">1<' in page
        assert 'id="quorum-leader">1<' in page  # gregor's own codec, over SASL too


def test_a_nodes_console_on_a_sasl_ssl_listener_trusts_its_truststore(tmp_path):
    pki = make_pki(tmp_path / "pki")
    config = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "console.listener": "http://127.0.0.1:0",
    }
    with Broker(config=config, log_level="INFO") as broker:
        first, refused, page = _signed_in_pages(_console_url(broker), "alice", "alice-secret")
        assert first.endswith("/login") and refused.startswith("401 ")
        assert 'id="signed-in">alice<' in page and 'id="broker-count">1<' in page


@pytest.mark.parametrize(
    ("protocol", "values", "expected"),
    [
        ("PLAINTEXT", {}, ({"security.protocol": "PLAINTEXT"}, False, None)),
        ("SASL_PLAINTEXT", {}, ({"security.protocol": "SASL_PLAINTEXT"}, True, None)),
        (
            "SASL_SSL",
            {"listener.name.sasl_ssl.ssl.truststore.location": "/ca.pem"},
            ({"security.protocol": "SASL_SSL", "ssl.ca.location": "/ca.pem"}, True, None),
        ),
        (
            "SSL",
            {"ssl.truststore.certificates": "PEM", "ssl.client.auth": "requested"},
            ({"security.protocol": "SSL", "ssl.ca.pem": "PEM"}, False, None),
        ),
    ],
)
def test_a_nodes_console_client_settings_follow_its_listener(protocol, values, expected):
    assert console_client(ListenerConfig(protocol, protocol, values)) == expected


def test_a_nodes_console_presents_the_listeners_keystore_when_it_must():
    listener = ListenerConfig(
        "SSL",
        "SSL",
        {
            "ssl.client.auth": "required",
            "ssl.truststore.location": "/ca.pem",
            "listener.name.ssl.ssl.keystore.location": "/node.pem",
            "ssl.key.password": "secret",
        },
    )
    assert console_client(listener) == (
        {
            "security.protocol": "SSL",
            "ssl.ca.location": "/ca.pem",
            "ssl.certificate.location": "/node.pem",
            "ssl.key.location": "/node.pem",
            "ssl.key.password": "secret",
        },
        False,
        None,
    )
    inline = ListenerConfig(
        "SSL",
        "SSL",
        {
            "ssl.client.auth": "required",
            "ssl.keystore.certificate.chain": "-----CHAIN-----\\nA",
            "ssl.keystore.key": "-----KEY-----\\nB",
        },
    )
    settings, _, warning = console_client(inline)
    assert warning is None
    assert (settings["ssl.certificate.pem"], settings["ssl.key.pem"]) == (
        "-----CHAIN-----\nA",
        "-----KEY-----\nB",
    )
    settings, _, warning = console_client(
        ListenerConfig("SSL", "SSL", {"ssl.client.auth": "required"})
    )
    assert settings == {"security.protocol": "SSL"}
    assert warning is not None and "ssl.client.auth=required" in warning


def test_a_nodes_console_on_an_ssl_listener_requiring_client_auth_serves_its_overview(tmp_path):
    """The listener refuses clients without a certificate it trusts: the console, given the
    node's own keystore, reads the cluster (confluent-kafka) and the quorum (gregor's codec)."""
    pki = make_pki(tmp_path / "pki")
    config = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",
        "console.listener": "http://127.0.0.1:0",
    }
    with Broker(config=config, log_level="INFO") as broker:
        assert "no client certificate" not in broker.read_log()
        status, page = _get(_console_url(broker) + "/")
        assert status == 200, page
        assert 'id="broker-count">1<' in page and 'id="quorum-leader">1<' in page
