"""What a node last saw of each feed, and the check that new items continue it
(``KnownPositions.continues``): pure, no Redis."""

from __future__ import annotations

from gateway.feed import StoredItem, team_feed
from gateway.store.last_seen import KnownPositions, chain_next

FEED = team_feed("acme", "00000000-0000-4000-8000-000000000001")


def chained(epoch: int, first: int, datas: list[bytes], before: str) -> list[StoredItem]:
    """Items from offset ``first`` whose chains continue ``before``, as the append step
    computes them."""
    out = []
    chain = before
    for index, data in enumerate(datas):
        chain = chain_next(chain, data)
        out.append(StoredItem(epoch, first + index, data, chain))
    return out


def known_at(epoch: int, offset: int, chain: str) -> KnownPositions:
    known = KnownPositions()
    known.advance(FEED, epoch, offset, chain)
    return known


def test_items_of_a_feed_never_seen_are_taken_and_the_newest_remembered() -> None:
    known = KnownPositions()
    items = chained(7, 1, [b"a", b"b"], "")
    assert known.continues(FEED, items, "")
    assert known.split(FEED) == (7, 2, items[-1].chain)


def test_the_announced_chain_before_is_compared_not_recomputed() -> None:
    known = known_at(7, 3, "c3")
    # Chains that are no hash of anything: only the announced "before" is looked at
    # for the first item, and each item's own chain for the one after it.
    items = [StoredItem(7, 4, b"d", "c4"), StoredItem(7, 5, b"e", "c5")]
    assert known.continues(FEED, items, "c3")
    assert known.split(FEED) == (7, 5, "c5")


def test_an_announced_chain_before_that_differs_is_a_rewritten_history() -> None:
    known = known_at(7, 3, "c3")
    # Even though this item's chain is what continuing "c3" would give: the append
    # step says it computed it from something else.
    items = chained(7, 4, [b"d"], "c3")
    assert not known.continues(FEED, items, "other")
    assert known.split(FEED) == (7, 3, "c3")  # nothing remembered


def test_without_an_announced_chain_every_item_is_recomputed() -> None:
    known = known_at(7, 3, "c3")
    assert known.continues(FEED, chained(7, 4, [b"d", b"e"], "c3"))
    assert known.split(FEED)[:2] == (7, 5)
    known = known_at(7, 3, "c3")
    assert not known.continues(FEED, chained(7, 4, [b"d"], "not c3"))
    assert not known.continues(FEED, [StoredItem(7, 4, b"d", "c4")])
    assert known.split(FEED) == (7, 3, "c3")


def test_items_gathered_from_several_messages_are_each_recomputed() -> None:
    # Item 4 came in one message; then the feed was rewritten from offset 4 on (a
    # restore the appending node could not see) and another message brought item 5,
    # computed from the new item 4.  Gathered into one list, without a "before": the
    # list's item 4 must not vouch for item 5.
    four = chained(7, 4, [b"d"], "c3")[0]
    five = chained(7, 5, [b"e"], chain_next("c3", b"not d"))[0]
    known = known_at(7, 3, "c3")
    assert not known.continues(FEED, [four, five])
    # Within one message (a "before" given) the append step computed each chain from
    # the item before it in the message, which is why it is trusted there.
    assert known_at(7, 3, "c3").continues(FEED, [four, five], "c3")


def test_an_item_at_the_known_offset_must_carry_the_known_chain() -> None:
    known = known_at(7, 3, "c3")
    assert known.continues(FEED, [StoredItem(7, 3, b"c", "c3"), StoredItem(7, 4, b"d", "c4")], "c2")
    assert known.split(FEED) == (7, 4, "c4")
    known = known_at(7, 3, "c3")
    assert not known.continues(FEED, [StoredItem(7, 3, b"c", "x3")], "c2")


def test_the_item_before_is_the_predecessor_only_when_it_is_the_offset_before() -> None:
    known = known_at(7, 5, "c5")
    # Offset 2 then 6: item 6's predecessor is not item 2, so its chain is recomputed
    # from the known one (and found to continue it).
    six = chained(7, 6, [b"f"], "c5")[0]
    assert known.continues(FEED, [StoredItem(7, 2, b"b", "c2"), six], "c1")
    assert known.split(FEED) == (7, 6, six.chain)
    known = known_at(7, 5, "c5")
    assert not known.continues(FEED, [StoredItem(7, 2, b"b", "c2"), StoredItem(7, 6, b"f", "c6")])


def test_other_epochs_are_not_compared() -> None:
    known = known_at(7, 3, "c3")
    # An older epoch's items: nothing to compare, nothing remembered.
    assert known.continues(FEED, [StoredItem(6, 9, b"z", "z9")], "z8")
    assert known.split(FEED) == (7, 3, "c3")
    # A newer epoch starts over: remembered as it is.
    assert known.continues(FEED, [StoredItem(8, 1, b"a", "a1")], "")
    assert known.split(FEED) == (8, 1, "a1")
