"""Which client a request belongs to (pure Python, no torch needed).

The engine only knows request ids, so the client of a request is derived from
its id: by default the part before the first ``"/"`` (``"alice/17"`` belongs
to ``"alice"``), or looked up in an explicit mapping first.
"""

from __future__ import annotations

from collections.abc import Mapping


class ClientResolver:
    """Maps an engine request id to a fairq client name.

    Resolution order: ``mapping[request_id]`` if present, else the text before
    the first ``separator`` when the id contains it (and that text is not
    empty), else ``default``.

    Args:
        separator: splits ``"client<sep>rest"`` ids; a non-empty string.
        mapping: explicit ``request_id -> client`` entries (copied).
        default: client of ids that match neither rule; a non-empty string.
    """

    def __init__(
        self,
        separator: str = "/",
        mapping: Mapping[str, str] | None = None,
        default: str = "default",
    ) -> None:
        if not isinstance(separator, str) or not separator:
            raise ValueError(f"separator must be a non-empty string, got {separator!r}")
        if not isinstance(default, str) or not default:
            raise ValueError(f"default must be a non-empty string, got {default!r}")
        entries: dict[str, str] = {}
        for rid, client in (mapping or {}).items():
            if not isinstance(client, str) or not client:
                raise ValueError(
                    f"mapping[{rid!r}] must be a non-empty client name, got {client!r}"
                )
            entries[str(rid)] = client
        self.separator = separator
        self.default = default
        self.mapping = entries

    def __call__(self, request_id: object) -> str:
        """Return the client of ``request_id`` (any object; compared as ``str``)."""
        rid = str(request_id)
        client = self.mapping.get(rid)
        if client is not None:
            return client
        head, sep, _ = rid.partition(self.separator)
        if sep and head:
            return head
        return self.default

    def __repr__(self) -> str:
        return (
            f"ClientResolver(separator={self.separator!r}, "
            f"mapping=<{len(self.mapping)} entries>, default={self.default!r})"
        )
