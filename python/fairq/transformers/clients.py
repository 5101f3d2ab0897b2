"""Which client (tenant) a request belongs to (pure Python, no torch needed).

The engine only knows request ids, so the client of a request is derived from
its id: by default the part before the first ``"/"`` (``"alice/17"`` belongs
to ``"alice"``), or looked up in an explicit mapping first.
``ClientResolver`` is :class:`fairq.transformers.tenants.TenantResolver`
(the engines' shared :class:`fairq.tenancy.SourceOrder`), under its old name.
"""

from __future__ import annotations

from fairq.transformers.tenants import TenantResolver

__all__ = ["ClientResolver"]

#: The old name of :class:`~fairq.transformers.tenants.TenantResolver`
#: (same constructor: ``ClientResolver(separator="/", mapping=None, default="default")``).
ClientResolver = TenantResolver
