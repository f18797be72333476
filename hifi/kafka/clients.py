"""Kafka clients configured from `KafkaSettings`, and the one place aiokafka errors are translated.

Every call into aiokafka that can fail (start, send, getmany, commit, committed, topics,
position, the offset look-ups, and the admin calls of `hifi.kafka.admin`) runs inside
`kafka_errors()`, which raises hifi's own errors with the cause named (`raise ... from exc`,
like httpx's `map_httpcore_exceptions`). No other module catches an aiokafka exception.
The clients start and stop here too (`running_client`), however they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
)
from typing import Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aiokafka_errors
from aiokafka.conn import create_conn

from hifi.errors import (
    BrokerAuthFailed,
    BrokerRefused,
    BrokerUnavailable,
    ConfigError,
    TokenRefused,
    UnknownTopic,
)
from hifi.kafka import probe, security
from hifi.kafka.oauthbearer import OAuthBearerTokens
from hifi.kafka.settings import KafkaSettings

log = structlog.get_logger(__name__)

Headers = list[tuple[str, bytes]]
Record = tuple[str, bytes | None, bytes | None, Headers]  # topic, key, value, headers
START_TIMEOUT_S = 15.0  # a client that cannot start by then fails with the cause
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # the largest produce request hifi sends
_AUTH_ERRORS = (
    aiokafka_errors.AuthenticationFailedError,
    aiokafka_errors.AuthenticationMethodNotSupported,
    aiokafka_errors.SaslAuthenticationFailed,
    aiokafka_errors.UnsupportedSaslMechanismError,
    aiokafka_errors.IllegalSaslStateError,
    aiokafka_errors.TopicAuthorizationFailedError,
    aiokafka_errors.GroupAuthorizationFailedError,
    aiokafka_errors.ClusterAuthorizationFailedError,
)


@contextlib.contextmanager
def kafka_errors(settings: KafkaSettings, doing: str) -> Iterator[None]:
    """Translate whatever aiokafka raises while `doing` into hifi's error tree."""
    where = f"kafka {settings.bootstrap}: {doing}"
    try:
        yield
    except aiokafka_errors.UnsupportedCodecError as exc:
        raise BrokerRefused(
            f"{where}: {exc}; hifi reads snappy, lz4 and zstd through aiokafka's codec extras"
            " (pip install 'aiokafka[snappy,lz4,zstd]')"
        ) from exc
    except aiokafka_errors.UnknownTopicOrPartitionError as exc:
        raise UnknownTopic(f"{where}: unknown topic or partition") from exc
    except (*_AUTH_ERRORS, KeyError) as exc:
        refusal = _refusal(settings, exc)
        if refusal is None:  # a KeyError that is not aiokafka's reading of a SCRAM refusal
            raise
        raise BrokerAuthFailed(f"{where}: refused: {refusal}") from exc
    except ssl.SSLError as exc:
        raise BrokerAuthFailed(
            f"{where}: TLS failed: {getattr(exc, 'reason', None) or exc}"
        ) from exc
    except aiokafka_errors.KafkaError as exc:
        if exc.retriable or isinstance(exc, _TRANSIENT):
            raise BrokerUnavailable(f"{where}: {_cause(exc)}") from exc
        raise BrokerRefused(f"{where}: {_cause(exc)}") from exc
    except (OSError, TimeoutError) as exc:
        raise BrokerUnavailable(f"{where}: {_cause(exc)}") from exc


_SASL_REFUSED = (
    aiokafka_errors.SaslAuthenticationFailed,
    aiokafka_errors.AuthenticationFailedError,
)


def _refusal(settings: KafkaSettings, exc: BaseException) -> str | None:
    """What the broker refused, naming who (never a password); None: not a refusal."""
    if isinstance(exc, KeyError):
        return _scram_refusal(settings, exc)
    if isinstance(exc, _SASL_REFUSED):
        return f"{_login(settings)}: {_cause(exc)}"
    if isinstance(exc, aiokafka_errors.UnsupportedSaslMechanismError):
        return (
            f"SASL mechanism {settings.sasl_mechanism} is not enabled on the broker"
            f" (HIFI_KAFKA_SASL_MECHANISM): {_cause(exc)}"
        )
    return _cause(exc)


def _login(settings: KafkaSettings) -> str:
    """Who was refused, for the message: never the password."""
    if settings.sasl_mechanism == "OAUTHBEARER":
        return f"authentication failed for OAuth client {settings.oauth_client_id!r} (OAUTHBEARER)"
    if settings.sasl_mechanism is None:
        return "authentication failed"
    return f"authentication failed for user {settings.username!r} ({settings.sasl_mechanism})"


# Not marked retriable by aiokafka, yet a later attempt can succeed: a commit refused during a
# rebalance, a timeout, or a connection that is refused now.
_TRANSIENT = (
    aiokafka_errors.CommitFailedError,
    aiokafka_errors.IllegalGenerationError,
    aiokafka_errors.RebalanceInProgressError,
    aiokafka_errors.KafkaTimeoutError,
    aiokafka_errors.KafkaConnectionError,
)


def _scram_refusal(settings: KafkaSettings, exc: KeyError) -> str | None:
    """What a SCRAM refusal says, None if `exc` is not one. aiokafka 0.14 reads the broker's
    final SCRAM message without a signature (RFC 5802's refusal, "e=unknown-user") as a
    KeyError raised in `ScramAuthenticator.process_server_final_message`."""
    traceback, frame = exc.__traceback__, None
    while traceback is not None:
        frame, traceback = traceback.tb_frame, traceback.tb_next
    if (
        frame is None
        or frame.f_globals.get("__name__") != "aiokafka.conn"
        or frame.f_code.co_name != "process_server_final_message"
    ):
        return None
    answer = frame.f_locals.get("server_final")
    said = (
        f" (the broker answered {answer[:80]!r})"
        if isinstance(answer, str) and answer.startswith("e=")
        else ""
    )
    return (
        f"SASL {settings.sasl_mechanism} authentication of user {settings.username!r}"
        f" failed{said}; check HIFI_KAFKA_USERNAME and HIFI_KAFKA_PASSWORD"
    )


def _cause(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and name not in text else (text or name)


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Connection and security options shared by every aiokafka client (the protocol; the TLS
    context with the CA, hostname verification and client certificate; the SASL mechanism with
    its credentials or token provider): every client hifi creates is built with them."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.security_protocol,
    }
    if settings.uses_tls:
        try:
            options["ssl_context"] = security.ssl_context(settings)
        except (ssl.SSLError, OSError) as exc:
            security.check_files(settings)  # names the variable and the file
            raise ConfigError(f"kafka TLS settings: {exc}") from None
    if settings.sasl_mechanism == "OAUTHBEARER":
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_oauth_token_provider"] = OAuthBearerTokens(settings)
    elif settings.sasl_mechanism:
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.username
        options["sasl_plain_password"] = (
            settings.password.get_secret_value() if settings.password else None
        )
    return options


# --- producing --------------------------------------------------------------------------


# --- consuming --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_client(
    client: AIOKafkaProducer | AIOKafkaConsumer, settings: KafkaSettings, doing: str
) -> AsyncIterator[None]:
    """Start an aiokafka client (its failure translated) and stop it when the block exits."""
    try:
        await start_client(client.start, settings, doing)
        yield
    finally:
        await stop_client(client)


async def stop_client(client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
    """Stop a client. A consumer stopped soon after it started can raise the cancellation of its
    own internal task (the coordinator's committed-offsets refresh); that is not a cancellation
    of ours, so it is absorbed unless this task is being cancelled itself.

    aiokafka's `stop()` marks the client closed before it closes anything, so one that gave up
    half-way cannot be stopped again: what it did not reach (a consumer's fetcher, the network
    client with its metadata task and sockets) is closed here, or it would outlive the client
    and refresh metadata every few minutes for the life of the process.
    """
    if await _completed(client.stop()):
        return
    for part in (getattr(client, "_fetcher", None), getattr(client, "_client", None)):
        if part is not None:  # both close idempotently
            await _completed(part.close())


async def _completed(step: Awaitable[None]) -> bool:
    """Await `step`; False when the cancellation of an internal task interrupted it (absorbed,
    unless this task is being cancelled itself)."""
    try:
        await step
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return False
    return True


async def start_client(
    start: Callable[[], Awaitable[None]], settings: KafkaSettings, doing: str
) -> None:
    """Start a client (an aiokafka `start`) within `START_TIMEOUT_S`; a failure says what the
    broker address does (`hifi.kafka.probe`): a cause in the set-up (TLS trust, a client certificate,
    the protocol, the SASL mechanism) is `BrokerAuthFailed`, exit 2."""
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            with kafka_errors(settings, doing):
                await start()
    except TimeoutError:
        diagnosis = await _diagnose(settings)
        failed = (
            f"kafka {settings.bootstrap}: {doing}: no Kafka answer within {START_TIMEOUT_S:g} s"
            f" over {settings.security_protocol}: {diagnosis}"
        )
        raise (BrokerAuthFailed if diagnosis.refused else BrokerUnavailable)(failed) from None
    except TokenRefused as exc:  # OAUTHBEARER: the token endpoint refused hifi's client
        raise BrokerAuthFailed(
            f"kafka {settings.bootstrap}: {doing}: no OAUTHBEARER token: {exc} (HIFI_KAFKA_OAUTH_*)"
        ) from exc
    except BrokerUnavailable as exc:
        refusal = await _login_refusal(settings)
        if refusal is not None:
            raise BrokerAuthFailed(
                f"kafka {settings.bootstrap}: {doing}: refused: {refusal}"
            ) from exc
        diagnosis = await _diagnose(settings)
        if diagnosis.refused:  # the cause, without aiokafka's "Unable to bootstrap from [...]"
            raise BrokerAuthFailed(f"kafka {settings.bootstrap}: {doing}: {diagnosis}") from exc
        raise BrokerUnavailable(f"{exc}: {diagnosis}") from exc


async def _diagnose(settings: KafkaSettings) -> probe.Diagnosis:
    context = security.ssl_context(settings) if settings.uses_tls else None
    return await probe.diagnose(settings, context)


_LOGIN_TIMEOUT_S = 10.0


async def _login_refusal(settings: KafkaSettings) -> str | None:
    """Why the broker refused the SASL login, None if it did not (or there is none).

    aiokafka's clients log a refused login and raise only "Unable to bootstrap" (the cause
    lost); one connection made as they make theirs, to the first bootstrap address, raises it.
    """
    if settings.sasl_mechanism is None:
        return None
    host, _, port = settings.bootstrap.split(",")[0].strip().rpartition(":")
    options = client_options(settings)
    try:
        async with asyncio.timeout(_LOGIN_TIMEOUT_S):
            connection = await create_conn(
                host.strip("[]") or "localhost",
                int(port),
                ssl_context=options.get("ssl_context"),
                security_protocol=settings.security_protocol,
                sasl_mechanism=settings.sasl_mechanism,
                sasl_plain_username=options.get("sasl_plain_username"),
                sasl_plain_password=options.get("sasl_plain_password"),
                sasl_oauth_token_provider=options.get("sasl_oauth_token_provider"),
            )
    except aiokafka_errors.UnsupportedSaslMechanismError:
        return None  # the probe names the mechanisms the broker offers
    except (*_AUTH_ERRORS, KeyError) as exc:
        return _refusal(settings, exc)
    except (aiokafka_errors.KafkaError, OSError, TimeoutError, ValueError):
        return None  # not a refusal: the probe tells what it is
    connection.close()
    return None


# --- topics -----------------------------------------------------------------------------
