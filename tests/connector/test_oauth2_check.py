"""`connector --check --probe[-post]` and the connector's start with `[auth]`, as an operator runs
them: a token fetched and used, or one line saying why not and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.connector.test_check import _run
from tests.connector.test_oauth2_bearer import write_auth_destination
from tests.hifi.oauth2_server import OAuth2Server

pytestmark = [pytest.mark.integration]


async def test_probe_post_fetches_a_token_and_sends_it(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """--probe-post fetches a token (ok, never printed) and the HEAD and the empty batch carry
    it; a refused client is one error line naming the token endpoint, exit 2."""
    await kafka_admin.ensure_topics(kafka_settings, [unique], partitions=1)
    async with OAuth2Server() as server:
        write_auth_destination(
            catalog_dir, unique, server.events_url, server.token_url, topic=unique
        )
        args = ("connector", "--dest", unique, "--catalog", str(catalog_dir), "--probe-post")
        secret = server.client_secret
        code, out, err = await _run(*args, bootstrap=kafka_settings.bootstrap, IDP_SECRET=secret)
        assert code == 0, out + err
        assert (
            f"ok      token endpoint {server.token_url} (client_id 'hifi-test'): token received"
            in out
        )
        assert f"destination {server.events_url}: the empty batch was answered 200: accepted" in out
        assert server.unauthorized == 0  # the HEAD and the POST carried the token
        assert all(value not in out + err for value in (secret, *server.issued))
        code, out, err = await _run(
            *args, bootstrap=kafka_settings.bootstrap, IDP_SECRET="wrong-secret"
        )
        assert code == 2, out + err
        assert (
            f"error   token endpoint {server.token_url} (client_id 'hifi-test') refused the client"
            " credentials: HTTP 401 (invalid_client)"
        ) in out
        assert out.splitlines()[-1] == "connector check: refused"


async def test_connector_start_refused_token_exits_2(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """The connector fetches its first token at start: refused, it exits 2 with one line."""
    async with OAuth2Server() as server:
        write_auth_destination(
            catalog_dir, unique, server.events_url, server.token_url, topic=unique
        )
        code, out, err = await _run(
            "connector",
            "--dest",
            unique,
            "--catalog",
            str(catalog_dir),
            bootstrap=kafka_settings.bootstrap,
            IDP_SECRET="wrong-secret",
        )
    assert code == 2, out + err
    last = err.strip().splitlines()[-1]
    assert f"token endpoint {server.token_url} (client_id 'hifi-test') refused" in last
    assert "Traceback" not in err
