"""The one thing pyproject.toml cannot say: an optional C extension.

``ckptdoctor.readers._cedges`` reads the heads and tails of many files with the GIL released
(``ckptdoctor/readers/_edges.py`` says why). It is ``optional``: where it cannot be built (no
compiler, no Python headers, not POSIX), setuptools says so and installs the package without
it, and ``ckptdoctor.readers._edges`` falls back to its Python twin, as msgpack and PyYAML do.
"""

import os

from setuptools import Extension, setup

CEDGES = Extension(
    "ckptdoctor.readers._cedges",
    sources=["ckptdoctor/readers/_cedges.c"],
    extra_compile_args=["-std=c11", "-pthread"],
    extra_link_args=["-pthread"],
    optional=True,
)

setup(ext_modules=[CEDGES] if os.name == "posix" else [])
