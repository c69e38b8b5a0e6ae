"""What a deployment does once before it serves, and ``make run`` at each start: the
database's schema up to head, and each lane's queue with its dead-letter queue."""

from __future__ import annotations

from collections.abc import Callable

from relay_api.settings import ApiSettings


def migrate(database_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from relay_core.db.engine import ensure_sqlite_directory
    from relay_core.settings import async_database_url

    ensure_sqlite_directory(database_url)
    config = Config()
    config.set_main_option("script_location", "relay_core:migrations")
    config.attributes["database_url"] = async_database_url(database_url)
    command.upgrade(config, "head")


async def create_queues(settings: ApiSettings, say: Callable[[str], None]) -> None:
    """Each lane's queue and DLQ with the redrive policy (safe to run again)."""
    from relay_core import queue

    async with queue.sqs_client(
        config=queue.client_config(settings), **queue.sqs_client_kwargs(settings)
    ) as sqs:
        for lane in settings.lanes():
            queue_url, dlq_url = await queue.create_lane(sqs, settings, lane)
            say(f"{lane:6} queue {queue_url}")
            say(f"{lane:6} dlq   {dlq_url} (maxReceiveCount {settings.queue_max_receive_count})")


async def switched_lanes(settings: ApiSettings) -> list[tuple[str, str]]:
    """The lanes an operator left switched (paused or draining), each with a line saying how
    and by whom: a switch is kept in the database across restarts, so a restarted ``make
    run`` would otherwise process nothing on them without saying why."""
    from relay_core import controls
    from relay_core.db.engine import create_engine, create_sessionmaker

    engine = create_engine(settings)
    try:
        async with create_sessionmaker(engine)() as session:
            lanes = (await controls.overview(session, settings.lanes()))["lanes"]
    finally:
        await engine.dispose()
    return [
        (
            lane["lane"],
            f"lane {lane['lane']} is {lane['state']} (since {lane['changedAt']} by "
            f"{lane['changedBy']}{': ' + lane['reason'] if lane['reason'] else ''})",
        )
        for lane in lanes
        if lane["state"] != controls.LaneState.running.value
    ]
