"""ckptdoctor's version: reports and SARIF name it, and ``ckptdoctor --version`` prints it.

A module of its own, importing nothing: the renderers read it without importing the package's
``__init__``, whose lazy ``preflight`` reaches the API."""

__version__ = "0.1.0"
