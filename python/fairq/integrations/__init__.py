"""The old home of the transformers and Ray integrations.

They are ``fairq.transformers`` and ``fairq.ray`` now; ``fairq.integrations.<engine>``
(and every module below it) still imports, as the very same module: the
finder of :mod:`fairq._moved`, which ``import fairq`` (run before this
package) installs.
"""
