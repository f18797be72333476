"""The admin client and the one group request the consumer needs of it (a LeaveGroup aiokafka
skipped): below both `admin` and `consuming`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.group import LeaveGroupRequest

from hifi.kafka.clients import client_options, kafka_errors, start_client
from hifi.kafka.settings import KafkaSettings

__all__ = ["admin_client", "leave_group"]


@contextlib.asynccontextmanager
async def admin_client(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client of `settings`, closed when the block exits."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    try:
        await start_client(admin.start, settings, "connect admin client")
        yield admin
    finally:
        await admin.close()


async def leave_group(settings: KafkaSettings, group_id: str, member_id: str) -> None:
    """Send the LeaveGroup for `member_id`, a member of `group_id` that stopped: one request to
    the group's coordinator; a refusal is a hifi error."""
    async with admin_client(settings) as admin:
        with kafka_errors(settings, f"leave group {group_id}"):
            node_id = await admin.find_coordinator(group_id)
            response = await admin._send_request(LeaveGroupRequest(group_id, member_id), node_id)
            if response.error_code:
                raise aiokafka_errors.for_code(response.error_code)(f"group {group_id}")
