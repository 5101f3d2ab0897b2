"""The old home of the transformers and Ray integrations.

They are ``fairq.transformers`` and ``fairq.ray`` now; ``fairq.integrations.<engine>``
(and every module below it) still imports, as the very same module
(:mod:`fairq._moved`).
"""

from __future__ import annotations

import fairq._moved  # noqa: F401  (the finder; installed by ``import fairq`` already)
