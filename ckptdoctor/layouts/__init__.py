"""The layouts: one module per framework, all that is known of it (names, units, roles, pointers,
metrics, wording). ``registry`` lists them (``LAYOUTS``, ``layout_named``, ``NAMED_FILES``) and
recognises which one wrote a folder; importing a module of this package loads only what that
module needs."""
