"""The optional compiled extensions; everything else is in pyproject.toml.

``arena/views/_hit.c`` is the compiled hit path; ``arena/planning/_search.c`` the compiled
offset search behind ``plan_offsets(time_limit=...)`` (MiniMalloc's solver ported to C);
``arena/planning/_place.c`` the compiled best-fit placement behind ``plan_offsets``;
``arena/planning/_rows.c`` a replayed step's cache list with a row per request index, which
the compiled step hit of ``arena/planning/_region_hit.c`` reads
(``arena/planning/_step_rows.h``, with NumPy's copy of a view that a step row and a scope's
memo keep in ``arena/planning/_view_copy.h``); ``arena/memory/_host.c`` the
compiled host allocation behind ``HostSource.allocate`` and a host ledger's compiled
replace, whose C-API (``arena/memory/_host_api.h``) ``arena/slots/_growth.c``, a slot's
compiled growth, calls; ``arena/slots/_slot.c`` the
slot's and its region stack's own stores, whose C-API (``arena/slots/_slot_api.h``) the
hit path calls; ``arena/planning/_region_hit.c`` the compiled hits of a replayed step's and
a scope's requests, over the hit path's C-API (``arena/views/_hit_api.h``). All are built
where a C
compiler and Python's headers are found; ``optional=True`` lets the install go on without
them, and arena then runs their pure-Python versions
(``python -m arena --version`` says which hit path is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Above the slots layer: it imports _slot's C-API (the slot's own stores).
        Extension(
            "arena.views._hit",
            ["arena/views/_hit.c"],
            depends=["arena/slots/_slot_api.h", "arena/views/_hit_api.h"],
            optional=True,
        ),
        # Above the views layer: it imports _hit's C-API (the request checks, the fresh
        # views) and _slot's (the slot's own stores).
        Extension(
            "arena.planning._region_hit",
            ["arena/planning/_region_hit.c"],
            depends=[
                "arena/views/_hit_api.h",
                "arena/slots/_slot_api.h",
                "arena/base/_fields.h",
                "arena/planning/_step_rows.h",
                "arena/planning/_view_copy.h",
            ],
            optional=True,
        ),
        Extension("arena.planning._search", ["arena/planning/_search.c"], optional=True),
        Extension("arena.planning._place", ["arena/planning/_place.c"], optional=True),
        # A replayed step's cache list with its per-request rows (read by _region_hit's
        # step hit).
        Extension(
            "arena.planning._rows",
            ["arena/planning/_rows.c"],
            depends=[
                "arena/planning/_step_rows.h",
                "arena/planning/_view_copy.h",
                "arena/views/_hit_api.h",
            ],
            optional=True,
        ),
        Extension(
            "arena.memory._host",
            ["arena/memory/_host.c"],
            depends=["arena/memory/_host_api.h", "arena/base/_fields.h"],
            optional=True,
        ),
        # Above the memory layer, as its module name says: it imports _host's C-API.
        Extension(
            "arena.slots._growth",
            ["arena/slots/_growth.c"],
            depends=["arena/memory/_host_api.h", "arena/base/_fields.h"],
            optional=True,
        ),
        # The slot's and its region stack's own stores, exported to _hit as a C-API.
        Extension(
            "arena.slots._slot",
            ["arena/slots/_slot.c"],
            depends=["arena/slots/_slot_api.h", "arena/base/_fields.h"],
            optional=True,
        ),
    ]
)
