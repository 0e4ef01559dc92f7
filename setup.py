"""The optional compiled hit path (arena/views/_hit.c); everything else is in pyproject.toml.

Built where a C compiler and Python's headers are found; ``optional=True`` lets the
install go on without it, and arena then serves every request in pure Python
(``python -m arena --version`` says which path is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("arena.views._hit", ["arena/views/_hit.c"], optional=True),
    ]
)
