"""The base layer: what every other layer may import and which imports none of them.

The int rules and the layout arithmetic (:mod:`~arena.base.layout`), dtypes
(:mod:`~arena.base.dtypes`), the sentinel values views are poisoned with
(:mod:`~arena.base.poison`) and the event types, listener plumbing, call sites and request
log (:mod:`~arena.base.events`). With the top-level modules ``errors``, ``environment``,
``forks`` and ``uncopyable`` it is the first layer of ``tests/test_layers.py``.
"""
