"""Work fanned out over other machines: ``verify --deep --ray`` hands the byte ranges of the deep
check (``readers.deep_scan``) to tasks on a Ray cluster, each of which reads its range itself and
runs the same block scan. A fan-out implements :class:`ckptdoctor.readers.deep_scan.Fanout`, so
the readers never know where their ranges were read; its library is imported only when asked for.
"""
