"""How bytes become arrays: per-structure plans, prepared-view caches, the hit paths and
the :class:`~arena.front.Front` that serves requests."""
