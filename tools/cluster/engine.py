"""The engine every campaign runs on: a Dask distributed cluster, and ``Campaign``, which fans units out on it.

``connect(cluster, scheduler, jobs, options)`` gives a ``distributed.Client``:

- ``cluster="local"`` (the default): a ``LocalCluster`` of ``jobs`` worker processes on this machine, one
  thread each (a unit runs a simulator: one core);
- ``scheduler="tcp://host:8786"``: a running cluster (``dask scheduler`` and ``dask worker`` started by hand);
- ``cluster="slurm"``, ``"lsf"``, ``"pbs"`` or ``"sge"``: dask-jobqueue's ``SLURMCluster`` (``LSFCluster``,
  ``PBSCluster``, ``SGECluster``) scaled to ``jobs`` workers, one batch job each; ``options`` (``queue=``,
  ``account=``, ``walltime=``, ``memory=``, ...) are its keyword arguments, over dask's ``jobqueue.yaml``.

A unit is a pure function of its arguments, so one run twice gives the same result: Dask runs the units of a
worker that dies again on another (``distributed.scheduler.allowed-failures`` times), and a unit that raises
runs once more (``retries=1``). ``Campaign`` records each unit's attempts in ``<work>/attempts/<key>/`` (one
file created per start: shared by client and workers, like the build directory), so each result says which
attempt gave it and on which worker; the campaign's progress line gives done, failed, running and an ETA, and
points to Dask's dashboard when one runs.
"""
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CLUSTERS", "batch_cluster", "connect", "Campaign", "Result", "Unit"]

#: The checkout: a batch job's worker starts in it.
ROOT = Path(__file__).resolve().parents[2]

#: ``--cluster`` names -> dask-jobqueue's cluster class names (``local``: a ``LocalCluster``).
CLUSTERS = {"local": None, "slurm": "SLURMCluster", "lsf": "LSFCluster", "pbs": "PBSCluster", "sge": "SGECluster"}


def options(pairs):
    """``["queue=normal", "cores=1"]`` -> ``{"queue": "normal", "cores": 1}`` (integers where they parse)."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"cluster option {pair!r}: expected key=value (e.g. queue=normal)")
        found[key.replace("-", "_")] = int(value) if value.isdigit() else value
    return found


def batch_cluster(cluster, cluster_options=()):
    """dask-jobqueue's cluster for batch system ``cluster``, no job submitted yet: one worker of one core per
    job (4 GB) in this checkout (its path must be the same on the nodes: a shared filesystem), over
    ``cluster_options``; ``.job_script()`` shows what each job runs."""
    import dask_jobqueue

    if CLUSTERS.get(cluster) is None:
        raise ValueError(f"cluster {cluster!r}: a batch system's cluster is one of "
                         f"{', '.join(k for k, v in CLUSTERS.items() if v)}")
    kwargs = {"cores": 1, "processes": 1, "memory": "4GB", "job_script_prologue": [f"cd {ROOT}"],
              **options(cluster_options)}
    return getattr(dask_jobqueue, CLUSTERS[cluster])(**kwargs)


def connect(cluster="local", scheduler=None, jobs=2, cluster_options=(), dashboard=":8787"):
    """A ``distributed.Client`` on the cluster asked for (see the module's docstring); its ``close_all()``
    closes the cluster it started too."""
    from distributed import Client, LocalCluster

    if cluster not in CLUSTERS:
        raise ValueError(f"cluster {cluster!r}: one of {', '.join(CLUSTERS)}")
    if jobs < 1:
        raise ValueError(f"jobs {jobs}: at least 1 worker")
    if scheduler:
        started = None
        try:
            client = Client(scheduler, timeout="30s")
        except OSError as error:
            raise ValueError(f"scheduler {scheduler}: cannot connect ({error})") from None
    elif CLUSTERS[cluster] is None:
        if cluster_options:
            raise ValueError("cluster options are for a batch system's cluster (slurm, lsf, pbs, sge), not local")
        started = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=dashboard,
                               host="127.0.0.1")
        client = Client(started)
    else:
        started = batch_cluster(cluster, cluster_options)
        started.scale(jobs)
        client = Client(started)

    def close_all():
        client.close()
        if started is not None:
            started.close()
    client.close_all = close_all
    return client


def dashboard_link(client):
    """The dashboard's address when the scheduler runs one (``bokeh`` installed), else None."""
    services = client.scheduler_info().get("services", {})
    return client.dashboard_link if "dashboard" in services else None


def _attempt(work, key):
    """Record one more start of unit ``key`` under ``work``; the number of this start (1 = the first)."""
    folder = Path(work) / "attempts" / key
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            os.close(os.open(folder / str(n), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


def _run_unit(work, key, function, args):
    """What a worker runs: ``function(*args)`` with its attempt, worker and time."""
    from distributed import get_worker

    attempt = _attempt(work, key)
    try:
        worker = get_worker().address
    except ValueError:
        worker = "local"
    started = time.monotonic()
    value = function(*args)
    return Result(key, value, attempt, f"{worker} ({socket.gethostname()}, pid {os.getpid()})",
                  time.monotonic() - started)


@dataclass
class Result:
    """A unit's value, the attempt that gave it (1 = its first run), the worker and the seconds it took;
    ``error``: why it gave no value (it raised on both tries; its replay command is in the report)."""
    key: str
    value: object
    attempt: int
    worker: str
    seconds: float
    error: str = ""


@dataclass
class Unit:
    """One unit of a campaign: ``key`` names it (in the report and in Dask's dashboard), ``function(*args)``
    computes it (importable on the workers, pure), ``replay`` is the command that runs it alone."""
    key: str
    function: object
    args: tuple
    replay: str
    failed: object = field(default=lambda value: False)


class Campaign:
    """Runs units on ``client``; ``work`` is the campaign's directory (shared with the workers), ``out``
    where the progress lines go (``print``'s signature)."""

    def __init__(self, client, work, name, out=print):
        self.client, self.work, self.name, self.out = client, Path(work), name, out

    def run(self, units):
        """{key: Result} of every unit, printing a progress line as each completes."""
        from distributed import as_completed

        self.work.mkdir(parents=True, exist_ok=True)
        by_key = {u.key: u for u in units}
        if len(by_key) != len(units):
            raise ValueError(f"{self.name}: two units share a key")
        link = dashboard_link(self.client)
        workers = len(self.client.scheduler_info().get("workers", {}))
        self.out(f"{self.name}: {len(units)} units on {workers} workers ({self.client.scheduler.address})"
                 + (f"; dashboard {link}" if link else ""), flush=True)
        futures = [self.client.submit(_run_unit, str(self.work), u.key, u.function, u.args, key=u.key, pure=False,
                                      retries=1) for u in units]
        results, failed, start = {}, 0, time.monotonic()
        for future in as_completed(futures):
            u = by_key[future.key]
            if future.status == "finished":
                result = future.result()
            else:
                error = future.exception()
                result = Result(u.key, None, len(list((self.work / "attempts" / u.key).glob("*"))), "-", 0.0,
                                f"{type(error).__name__}: {error}".splitlines()[0])
            results[u.key] = result
            bad = bool(result.error) or u.failed(result.value)
            failed += bad
            done, elapsed = len(results), time.monotonic() - start
            assigned = sum(k in by_key and k not in results for keys in self.client.processing().values()
                           for k in keys)          # a worker is given a little more than its threads run
            running = min(assigned, sum(self.client.nthreads().values()))
            eta = f", ETA {elapsed / done * (len(units) - done):.0f} s" if done < len(units) else ""
            state = result.error or ("failed" if bad else "ok")
            retried = f", attempt {result.attempt}" if result.attempt > 1 else ""
            self.out(f"{self.name}: [{done}/{len(units)} done, {failed} failed, {running} running, "
                     f"{elapsed:.0f} s{eta}] {u.key}: {state} ({result.seconds:.0f} s{retried})", flush=True)
        return results

    def retried(self, results):
        """Lines naming each unit that ran more than once (its worker died, or it raised)."""
        return [f"  retried {key}: attempt {r.attempt} gave the result on {r.worker}" for key, r in results.items()
                if r.attempt > 1]
