"""Tests of the test infrastructure itself: tests/conftest.py and tests/support/."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.redis_server import RedisServer, delete_keys_with_prefix, free_port


def client(url: str, timeout: float = 5.0) -> redis.Redis:
    """A client that fails fast: no retries, short socket timeouts."""
    return redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


# -- conftest fixtures ------------------------------------------------------


def test_redis_url_answers_ping(redis_url: str) -> None:
    with client(redis_url) as r:
        assert r.ping() is True


def test_redis_prefix_is_unique_and_namespaced(redis_prefix: str) -> None:
    assert redis_prefix.startswith("gwtest:")
    assert len(redis_prefix) == len("gwtest:") + 8


def test_prefix_cleanup_deletes_only_the_prefix(redis_url: str, redis_prefix: str) -> None:
    other = redis_prefix + "-other"  # shares the text but not the "prefix:" namespace
    with client(redis_url) as r:
        pipe = r.pipeline(transaction=False)
        for i in range(1234):  # more than one UNLINK batch
            pipe.set(f"{redis_prefix}:k{i}", i)
        pipe.xadd(f"{redis_prefix}:stream", {"f": "v"})
        pipe.set(f"{other}:keep", 1)
        pipe.execute()

        removed = delete_keys_with_prefix(redis_url, f"{redis_prefix}:", batch=500)

        assert removed == 1235
        assert list(r.scan_iter(match=f"{redis_prefix}:*", count=1000)) == []
        assert r.get(f"{other}:keep") == b"1"
        assert delete_keys_with_prefix(redis_url, other) == 1


def test_prefix_cleanup_escapes_glob_characters(redis_url: str, redis_prefix: str) -> None:
    with client(redis_url) as r:
        r.set(f"{redis_prefix}:a*b", 1)
        r.set(f"{redis_prefix}:aXb", 1)
        assert delete_keys_with_prefix(redis_url, f"{redis_prefix}:a*") == 1
        assert r.exists(f"{redis_prefix}:aXb") == 1


def test_prefix_cleanup_refuses_empty_prefix(redis_url: str) -> None:
    with pytest.raises(ValueError):
        delete_keys_with_prefix(redis_url, "")


# -- RedisServer -------------------------------------------------------------


def test_free_port_is_bindable() -> None:
    assert 0 < free_port() < 65536


@pytest.mark.redis_admin
def test_server_properties_and_cleanup() -> None:
    with RedisServer() as server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert server.pid is not None and server.running
        directory = server.dir
        assert directory.is_dir()
        with client(server.url) as r:
            assert r.ping() is True
    assert not server.running
    assert not directory.exists()


@pytest.mark.redis_admin
def test_persistent_server_keeps_saved_keys_across_restart() -> None:
    with RedisServer(persistence=True) as first:
        with client(first.url) as r:
            r.set("k", "v")
            r.save()
        first.stop()
        assert (first.dir / "dump.rdb").exists()

        # A new server on the same directory and port loads the snapshot.
        with RedisServer(persistence=True, port=first.port, dir=first.dir) as second:
            assert second.port == first.port
            with client(second.url) as r:
                assert r.get("k") == b"v"
        assert first.dir.exists()  # not ours to remove: the first server owns it


@pytest.mark.redis_admin
def test_persistent_server_loses_unsaved_keys_on_kill() -> None:
    with RedisServer(persistence=True) as server:
        with client(server.url) as r:
            r.set("saved", 1)
            r.save()
            r.set("unsaved", 1)
        server.kill()
        assert not server.running
        server.start()
        with client(server.url) as r:
            assert r.get("saved") == b"1"
            assert r.get("unsaved") is None


@pytest.mark.redis_admin
def test_non_persistent_server_starts_empty_after_restart() -> None:
    with RedisServer() as server:
        with client(server.url) as r:
            r.set("k", "v")
            r.save()  # even an explicit SAVE does not survive a restart
        server.stop()
        server.start()
        with client(server.url) as r:
            assert r.get("k") is None
            assert r.dbsize() == 0


@pytest.mark.redis_admin
def test_replica_receives_writes_from_primary() -> None:
    with (
        RedisServer() as primary,
        RedisServer(replica_of=primary) as replica,
        client(primary.url) as p,
        client(replica.url) as r,
    ):
        p.set("k", "from-primary")
        assert wait_for(lambda: r.info("replication")["master_link_status"] == "up")
        assert wait_for(lambda: r.get("k") == b"from-primary")
        assert r.info("replication")["role"] == "slave"


@pytest.mark.redis_admin
def test_pause_and_resume() -> None:
    with RedisServer() as server:
        server.pause()
        try:
            with client(server.url, timeout=0.3) as r, pytest.raises(redis.TimeoutError):
                r.ping()
        finally:
            server.resume()
        with client(server.url) as r:
            assert r.ping() is True


@pytest.mark.redis_admin
def test_stop_works_while_paused() -> None:
    server = RedisServer()
    try:
        server.start()
        server.pause()
        server.stop()
        assert not server.running
    finally:
        server.close()


@pytest.mark.redis_admin
def test_start_failure_reports_log_tail() -> None:
    with RedisServer() as holder:
        clash = RedisServer(port=holder.port)  # the port is taken
        try:
            with pytest.raises(RuntimeError, match="exited with code") as info:
                clash.start(timeout=5)
            assert "redis.log" in str(info.value)
        finally:
            clash.close()
