"""How bytes become arrays: dtypes, layout arithmetic, per-structure plans, prepared-view
caches, poisoning, and the :class:`~arena.views.front.Front` that serves requests."""
