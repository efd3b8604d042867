"""The rules: one module per family (``completeness`` 1xx, ``integrity`` 2xx, ``consistency`` 3xx,
``safety`` 4xx, ``disk`` 5xx), each rule's documentation beside the checks that fire it.
``registry`` puts them together (``RULES``, ``CHECKS``, ``check``); importing a module of this
package loads only what that module needs."""
