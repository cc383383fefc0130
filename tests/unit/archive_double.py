"""An in-memory stand-in for ``ledger.archive.DiskArchive`` (unit tests touch no file)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class MemoryArchive:
    """Holds records (bytes) and links in dicts, with DiskArchive's contract."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.named: dict[tuple[str, str], str] = {}

    def put(
        self,
        space: str,
        key: str,
        value: bytes,
        tag: str = "",
        links: Sequence[tuple[str, str]] = (),
    ) -> None:
        assert type(value) is bytes
        self.records[(space, key)] = (tag, value)
        for link_space, name in links:
            self.link(link_space, name, key)

    def link(self, space: str, key: str, target: str) -> None:
        self.named[(space, key)] = target

    def get(self, space: str, key: str) -> bytes | None:
        found = self.records.get((space, key))
        return None if found is None else found[1]

    def target(self, space: str, key: str) -> str | None:
        return self.named.get((space, key))

    def might_hold(self, space: str, key: str) -> bool:
        return (space, key) in self.records or (space, key) in self.named

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]:
        for (s, _), (t, blob) in sorted(self.records.items()):
            if s == space and (tag is None or t == tag):
                yield blob

    def links(self, space: str) -> Iterator[tuple[str, str]]:
        for (s, key), target in sorted(self.named.items()):
            if s == space:
                yield key, target

    def close(self) -> None:
        self.records.clear()
        self.named.clear()
