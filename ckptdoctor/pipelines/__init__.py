"""The pipelines: paths → runs → findings, for ``inspect`` (``scan``) and ``verify``."""
