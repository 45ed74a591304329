"""The fold cache's two preludes (pure store, no sockets): the AG-UI prelude, whose
``MESSAGES_SNAPSHOT`` carries A2UI surfaces compacted, and the A2UI messages that
rebuild a run's live surfaces (the WebSocket ``a2ui`` format)."""

from __future__ import annotations

import msgspec
import pytest

from gateway.agui.events import encode
from gateway.agui.fold import RunFold
from gateway.cursor import Cursor
from gateway.dialects import a2ui
from gateway.fanout.foldcache import FoldCache
from gateway.feed import NewItem, run_feed
from gateway.store.memory import MemoryStore
from gateway.wire.format import A2UI_PRELUDE, AGUI_PRELUDE
from tests.dialects.a2ui_runs import SURFACES

pytestmark = pytest.mark.anyio

FEED = run_feed("acme", "t", "r")


async def test_each_prelude_kind_at_a_cursor() -> None:
    store = MemoryStore()
    events = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}]
    events += a2ui.derive(SURFACES, RunFold())
    result = await store.append(FEED, [NewItem(None, encode(e)) for e in events], retention=10**6)
    folds = FoldCache(store, store)
    for k in (1, 4, 11, len(events)):
        at = Cursor(result.state.epoch, k)
        fold = RunFold()
        for event in events[:k]:
            fold.apply(event)
        agui, ended = await folds.prelude(FEED, at)
        assert not ended
        expected = fold.prelude("t", "r", compactors=a2ui.PRELUDE_COMPACTORS)
        assert [msgspec.json.decode(e) for e in agui] == expected
        messages, _ = await folds.prelude(FEED, at, A2UI_PRELUDE)
        assert [msgspec.json.decode(m) for m in messages] == a2ui.rejoin_messages(fold)
        # Each kind is kept apart and encoded once.
        assert (await folds.prelude(FEED, at, AGUI_PRELUDE))[0] is agui
        assert (await folds.prelude(FEED, at, A2UI_PRELUDE))[0] is messages
