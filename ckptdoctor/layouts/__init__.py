"""The layouts: one module per framework, all that is known of it (names, units, roles, pointers,
metrics, wording). ``registry`` lists them (``LAYOUTS``, ``layout_named``, ``NAMED_FILES``) and
recognises which one wrote a folder; the modules named for no framework do what every layout
shares (``base``: the classes a layout subclasses; ``hooks``: its hooks and their defaults;
``grouping``, ``folders``, ``judging``: claims into a run). Importing a module of this package
loads only what that module needs."""
