"""Runs in object stores (``s3://``, ``gs://``, ``az://``): their URLs, the client that lists and
reads them (obstore, imported only when a URL is given), and their listings as ``discover`` makes
them for local folders."""
