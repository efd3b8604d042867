"""The readers: one module per file format, each a pure function of a ``Sample`` that declares its
formats once (``SPECS``). ``files`` is the one place that opens files (``probe``, ``read_whole``,
``with_keys``); importing a module of this package loads only what that module needs."""
