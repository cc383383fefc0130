"""An in-memory stand-in for ``ledger.archive.DiskArchive`` (unit tests touch no file)."""

from __future__ import annotations

from collections.abc import Iterator


class MemoryArchive:
    """Holds records (bytes) and links in dicts, with DiskArchive's contract."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.links: dict[tuple[str, str], str] = {}

    def put(self, space: str, key: str, value: bytes, tag: str = "") -> None:
        assert type(value) is bytes
        self.records[(space, key)] = (tag, value)

    def link(self, space: str, key: str, target: str) -> None:
        self.links[(space, key)] = target

    def get(self, space: str, key: str) -> bytes | None:
        found = self.records.get((space, key))
        return None if found is None else found[1]

    def target(self, space: str, key: str) -> str | None:
        return self.links.get((space, key))

    def might_hold(self, space: str, key: str) -> bool:
        return (space, key) in self.records or (space, key) in self.links

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]:
        for (s, _), (t, blob) in sorted(self.records.items()):
            if s == space and (tag is None or t == tag):
                yield blob

    def close(self) -> None:
        self.records.clear()
        self.links.clear()
