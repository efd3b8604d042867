"""The planners: pure functions from a run and the world around it to a plan (``retention`` for
prune, ``repair``) or a verdict (``space`` for diskcheck); ``metrics`` reads what ``--keep-best``
ranks by."""
