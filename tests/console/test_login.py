"""`gregor console --login`: every page needs a sign-in with SASL credentials, each session's
clients are that user's (so the cluster's ACLs decide what it sees), a wrong password is a 401
and no session, signing out ends the session; and the same in Chromium."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from gregor import Broker
from gregor.console.app import create_app
from gregor.console.settings import ConsoleSettings
from tests.console.browser import chromium, console_process, needs_chromium, new_page
from tests.console.conftest import error_of, token_of

pytestmark = pytest.mark.client

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_eve="eve-pw";'
)
SECRET = "secret-topic"


@pytest.fixture(scope="module")
def secure() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    with Broker(config) as broker:
        admin = AdminClient(
            {
                "bootstrap.servers": broker.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "admin",
                "sasl.password": "admin-pw",
            }
        )
        admin.create_topics([NewTopic(SECRET, 1, 1)])[SECRET].result(10)
        yield broker


def _sign_in(client: TestClient, user: str, password: str) -> int:
    token = token_of(client.get("/login").text)
    form = {"token": token, "user": user, "password": password, "mechanism": "PLAIN"}
    return client.post("/login", data=form).status_code


def test_each_session_signs_in_and_sees_what_its_acls_allow(secure):
    settings = ConsoleSettings(
        secure.bootstrap,
        client_config={"security.protocol": "SASL_PLAINTEXT"},
        login=True,
        request_timeout_s=5,
    )
    with TestClient(create_app(settings), follow_redirects=False) as client:
        for path in ("/", "/topics", f"/topics/{SECRET}/messages", "/groups"):
            answer = client.get(path)
            assert answer.status_code == 303 and answer.headers["location"] == "/login", path
        wrong = client.post(
            "/login",
            data={"token": token_of(client.get("/login").text), "user": "eve", "password": "x"},
        )
        assert wrong.status_code == 401 and "the cluster refused the login" in error_of(wrong.text)
        assert client.get("/topics").status_code == 303  # no session came of it
        assert _sign_in(client, "eve", "eve-pw") == 303
        topics = client.get("/topics")
        assert topics.status_code == 200 and SECRET not in topics.text  # eve may not describe it
        assert 'id="signed-in">eve<' in topics.text
        client.post("/logout", data={"token": token_of(topics.text)})
        assert client.get("/topics").status_code == 303
        assert _sign_in(client, "admin", "admin-pw") == 303
        assert f'<a href="/topics/{SECRET}">{SECRET}</a>' in client.get("/topics").text
        assert client.get("/").status_code == 200


@needs_chromium
def test_sign_in_and_out_in_a_browser(secure, tmp_path):
    settings = tmp_path / "client.properties"
    settings.write_text("security.protocol=SASL_PLAINTEXT\n")
    with console_process(secure.bootstrap, "--login", "--command-config", str(settings)) as url:
        with chromium() as browser:
            errors: list[str] = []
            page = new_page(browser, errors)
            page.goto(url + "/topics")
            page.wait_for_url("**/login")
            form = page.locator("#login")
            form.locator("input[name=user]").fill("admin")
            form.locator("input[name=password]").fill("admin-pw")
            form.get_by_role("button", name="Sign in").click()
            page.wait_for_selector("#signed-in")
            assert page.locator("#signed-in").inner_text() == "admin"
            assert page.locator("#broker-count").inner_text() == "1"
            page.goto(url + "/topics")
            assert page.get_by_role("link", name=SECRET, exact=True).count() == 1
            page.locator("#sign-out").click()
            page.wait_for_url("**/login")
            page.goto(url + "/topics")
            page.wait_for_url("**/login")
            page.close()
            assert errors == []
