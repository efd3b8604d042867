"""The one thing pyproject.toml cannot say: optional C extensions.

``ckptdoctor.readers._cedges`` reads the heads and tails of many files with the GIL released
(``ckptdoctor/readers/_edges.py`` says why), and ``ckptdoctor._clisting`` lists and stats a
folder's entries (``ckptdoctor/discover.py``). Both are ``optional``: where one cannot be built
(no compiler, no Python headers, not POSIX), setuptools says so and installs the package without
it, and its module falls back to its Python twin, as msgpack and PyYAML do.
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

CLISTING = Extension(
    "ckptdoctor._clisting",
    sources=["ckptdoctor/_clisting.c"],
    extra_compile_args=["-std=c11"],
    optional=True,
)

setup(ext_modules=[CEDGES, CLISTING] if os.name == "posix" else [])
