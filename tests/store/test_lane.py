"""The pipelined connection (``gateway/store/redis/client/pipelined.py``): one raw connection for
appends, on a ``redis-server`` of the test's own: replies reach their callers in order, the
handshake authenticates and selects, a lost connection is replaced and only unanswered
commands are sent again, a demoted master is refused, a restart is noticed, a command
goes at once to an idle connection and the loop iteration's others in one write after
it, a caller that stops waiting leaves its reply to be dropped in its turn, and a write
left unanswered for the timeout takes the connection."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import hiredis
import pytest
import redis

from gateway.errors import Unavailable
from gateway.feed import NewItem, team_feed
from gateway.store.redis import RedisFeeds
from gateway.store.redis.client.pipelined import PipelinedConnection
from gateway.store.redis.client.resp import _pack, pack
from gateway.store.redis.connection import RedisConnection
from tests.support.redis_server import RedisServer
from tests.support.wait import until

pytestmark = [pytest.mark.anyio, pytest.mark.redis_admin]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port)
    yield client
    client.close()


@pytest.fixture
async def conn(server: RedisServer) -> AsyncIterator[RedisConnection]:
    connection = RedisConnection(server.url)
    yield connection
    await connection.aclose()


@pytest.fixture
def lane(conn: RedisConnection) -> PipelinedConnection:
    """The node's pipelined connection to the test's server."""
    made = conn.pipelined_connection()
    assert made is not None
    return made


def test_pack_is_resp2_and_reads_back() -> None:
    packed = pack(["SET", b"k\r\n", 42])
    assert packed == b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$2\r\n42\r\n"
    reader = hiredis.Reader()
    reader.feed(packed)
    assert reader.gets() == [b"SET", b"k\r\n", b"42"]


@pytest.mark.parametrize(
    "args",
    [
        ["EVALSHA", "f" * 40, 3, "gw:m", "gw:s", "gw:i", "append", 1000, -1, "", b"\x00\xff"],
        ["SET", "clé", 2**70],
        ["ECHO", True, False],  # hiredis refuses bools: packed by hand, as integers
        [],
    ],
)
def test_pack_gives_the_same_bytes_whoever_packs(args: list[bytes | str | int]) -> None:
    packed = pack(args)
    assert packed == _pack(args)
    reader = hiredis.Reader()
    reader.feed(packed)
    expected = [
        a if isinstance(a, bytes) else str(int(a) if isinstance(a, bool) else a).encode()
        for a in args
    ]
    assert reader.gets() == expected


def _blocked(admin: redis.Redis, command: str) -> list[dict[str, object]]:
    return [c for c in admin.client_list() if c.get("cmd") == command]


async def test_concurrent_callers_each_get_their_own_replies(lane: PipelinedConnection) -> None:
    got: dict[int, list[object]] = {}

    async def caller(n: int) -> None:
        got[n] = await lane.run([pack(["INCRBY", f"k{n}", n]), pack(["ECHO", f"e{n}"])])

    assert await lane.run([pack(["PING"])]) == [b"PONG"]  # connected
    writes = lane.writes
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for n in range(1, 51):
                tg.start_soon(caller, n)
    assert got == {n: [n, f"e{n}".encode()] for n in range(1, 51)}
    assert lane.connects == 1
    # Started in one loop iteration: the first caller's commands went at once (nothing
    # was outstanding), the other 49 callers' 98 in one write after them.
    assert lane.writes == writes + 2
    # A refused command is its error in its place; the others are answered.
    replies = await lane.run([pack(["ECHO", "a"]), pack(["NOSUCH"]), pack(["ECHO", "b"])])
    assert replies[0] == b"a" and replies[2] == b"b"
    assert isinstance(replies[1], hiredis.ReplyError)


async def test_the_handshake_authenticates_and_selects_the_database() -> None:
    with RedisServer() as srv:
        redis.Redis(port=srv.port).config_set("requirepass", "s3cret")
        admin = redis.Redis(port=srv.port, password="s3cret", db=3)
        conn = RedisConnection(f"redis://:s3cret@127.0.0.1:{srv.port}/3")
        wrong = RedisConnection(f"redis://:nope@127.0.0.1:{srv.port}/3")
        try:
            lane = conn.pipelined_connection()
            assert lane is not None
            assert await lane.run([pack(["SET", "where", "db3"])]) == [b"OK"]
            assert admin.get("where") == b"db3"
            wrong_lane = wrong.pipelined_connection()
            assert wrong_lane is not None
            with pytest.raises(Unavailable, match="handshake"):
                await wrong_lane.run([pack(["PING"])])
        finally:
            await conn.aclose()
            await wrong.aclose()
            admin.close()


async def test_a_lost_connection_sends_again_only_what_was_unanswered(
    admin: redis.Redis, lane: PipelinedConnection
) -> None:
    replies: list[object] = []

    async def caller() -> None:
        # INCR is answered at once; BLPOP's reply is still due when the connection dies.
        replies.extend(await lane.run([pack(["INCR", "n"]), pack(["BLPOP", "q", 5])]))

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await until(lambda: len(_blocked(admin, "blpop")) == 1, 5, "blocked")
            admin.client_kill_filter(_id=_blocked(admin, "blpop")[0]["id"])
            # The BLPOP is sent again on a new connection (the INCR is not).
            await until(lambda: len(_blocked(admin, "blpop")) == 1, 5, "blocked again")
            admin.rpush("q", b"v")
    assert replies == [1, [b"q", b"v"]]
    assert admin.get("n") == b"1"
    assert lane.connects == 2


async def test_a_caller_that_stops_waiting_leaves_its_reply_to_be_dropped(
    admin: redis.Redis, lane: PipelinedConnection
) -> None:
    async def gives_up() -> None:
        await lane.run([pack(["BLPOP", "q", 5])])

    got: list[list[object]] = []

    async def echo() -> None:
        got.append(await lane.run([pack(["ECHO", "mine"])]))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gives_up)
            await until(lambda: len(_blocked(admin, "blpop")) == 1, 5, "blocked")
            tg.cancel_scope.cancel()  # the caller's own bound: it gives up
        # Its BLPOP is still due on the connection; the next caller's ECHO follows it.
        async with anyio.create_task_group() as tg:
            tg.start_soon(echo)
            admin.rpush("q", b"v")
    # The BLPOP's reply went nowhere, the ECHO's to its caller, on the same connection.
    assert got == [[b"mine"]]
    assert admin.llen("q") == 0
    assert lane.connects == 1


async def test_a_write_left_unanswered_for_the_timeout_takes_the_connection(
    server: RedisServer, admin: redis.Redis
) -> None:
    conn = RedisConnection(server.url, timeout=0.3)
    lane = conn.pipelined_connection()
    assert lane is not None
    try:
        with anyio.fail_after(10):
            with pytest.raises(Unavailable, match=r"did not answer within 0\.3 s"):
                await lane.run([pack(["BLPOP", "q", 5])])  # answered in 5 s: too late
            # The connection went, and its BLPOP with it: nothing waits on "q" ...
            await until(lambda: not _blocked(admin, "blpop"), 5, "unblocked")
            admin.rpush("q", b"v")
            # ... and the next caller's reply is its own, on a new connection.
            assert await lane.run([pack(["LPOP", "q"])]) == [b"v"]
        assert lane.connects == 2
    finally:
        await conn.aclose()


async def test_each_write_has_the_whole_timeout_though_one_timer_serves_them_all(
    server: RedisServer,
) -> None:
    """The lane's one timer is set for its first write; when it fires, that write is
    answered and a later one is not yet due: it waits for that one's time, then takes
    the connection (neither early nor never)."""
    conn = RedisConnection(server.url, timeout=0.5)
    lane = conn.pipelined_connection()
    assert lane is not None
    try:
        with anyio.fail_after(10):
            # Answered (nil) by Redis after 0.2 s, inside the timeout: the timer stays.
            assert await lane.run([pack(["BLPOP", "q1", "0.2"])]) == [None]
            started = time.monotonic()
            with pytest.raises(Unavailable, match=r"did not answer within 0\.5 s"):
                await lane.run([pack(["BLPOP", "q2", 5])])
            # Its own 0.5 s, though the timer was first due 0.3 s after it was sent.
            assert time.monotonic() - started >= 0.5
        assert lane.connects == 1
    finally:
        await conn.aclose()


async def test_a_replica_refuses_writes_after_every_attempt(server: RedisServer) -> None:
    with RedisServer(replica_of=server) as replica:
        conn = RedisConnection(replica.url)
        lane = PipelinedConnection(conn)
        try:
            with pytest.raises(Unavailable, match="READONLY"):
                await lane.run([pack(["SET", "k", "v"])])
            assert lane.connects == 3  # each attempt looked for the master again
        finally:
            lane.close()
            await conn.aclose()


async def test_a_restarted_server_is_noticed_and_scripts_loaded_again(
    server: RedisServer,
) -> None:
    """The handshake's run_id: another server process makes the node suspect its feeds
    (verified before reading on).  The restarted server lost its scripts: appends load
    the script again (NOSCRIPT) and go on."""
    conn = RedisConnection(server.url, prefix="lane")
    feeds = RedisFeeds(conn)
    feed = team_feed("tenant", "t1")
    try:
        first = await feeds.append(feed, [NewItem("a", b'{"a":1}')], retention=100)
        assert conn.server_changes == 0
        server.stop()
        server.start()
        with anyio.fail_after(10):
            again = await feeds.append(feed, [NewItem("b", b'{"a":2}')], retention=100)
        assert conn.server_changes == 1 and conn.suspect
        # An empty restarted server: the feed starts again in a new epoch.
        assert again.cursors[0].epoch != first.cursors[0].epoch
    finally:
        await conn.aclose()


async def test_appends_over_a_unix_socket(tmp_path: Path) -> None:
    """A ``unix://`` URL: the lane connects to the socket, as redis-py's pool does."""
    path = tmp_path / "redis.sock"
    with RedisServer(extra_args=["--unixsocket", str(path), "--unixsocketperm", "700"]) as srv:
        conn = RedisConnection(f"unix://{path}", prefix="lane")
        feeds = RedisFeeds(conn)
        try:
            result = await feeds.append(
                team_feed("tenant", "t1"), [NewItem("a", b'{"a":1}')], retention=100
            )
            assert result.cursors[0].offset == 1
            lane = conn.pipelined_connection()
            assert lane is not None and lane.connects == 1
            # The item is on that server (read back over TCP).
            admin = redis.Redis(port=srv.port)
            assert admin.xlen(feeds.keys(team_feed("tenant", "t1"))[1]) == 1
            admin.close()
        finally:
            await conn.aclose()
