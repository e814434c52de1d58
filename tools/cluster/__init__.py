"""Scale-out: seed regressions, mutation runs and scenario sweeps as units of one campaign on a Dask cluster
(``python -m tools.cluster regress|mutants|sweep``; ``engine``: the cluster and the campaign runner)."""
