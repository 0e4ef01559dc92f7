"""The base layer: what every other layer may import and which imports none of them.

Layout arithmetic and dtypes (:mod:`~arena.base.layout`, :mod:`~arena.base.dtypes`), the
sentinel values views are poisoned with (:mod:`~arena.base.poison`) and the event types and
listener plumbing (:mod:`~arena.base.events`). With the top-level modules ``errors``,
``ints``, ``environment``, ``forks`` and ``uncopyable`` it is the first layer of
``tests/test_layers.py``.
"""
