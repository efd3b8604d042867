"""Renderers: one module per output format, all fed the same :class:`~ckptdoctor.model.Report`."""
