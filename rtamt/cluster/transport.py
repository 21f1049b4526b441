"""How the client reaches its workers: :class:`RayTransport` (one Ray actor per worker, each
a separate process owning a :class:`~rtamt.cluster.host.StreamHost`) or
:class:`InProcessTransport` (hosts in the client's process, one thread each; for tests
of the client's logic without Ray).

Both give the client the same four operations: start a worker, send one message to a
worker (a future), wait for the replies of several workers at once (a dead worker's
reply is reported as lost, never waited for), and kill a worker (tests).  Ray is imported
here only, and only when a :class:`RayTransport` is made.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import socket

from .host import StreamHost

__all__ = ["RtamtClusterError", "WorkerLost", "InProcessTransport", "RayTransport",
           "check_reachable"]


class RtamtClusterError(RuntimeError):
    """The cluster cannot be reached or did not answer in time."""


class WorkerLost(RuntimeError):
    """A worker died (its process is gone)."""


def check_reachable(address: str, timeout: float) -> None:
    """Raise :class:`RtamtClusterError` unless a TCP connection to ``address``
    (``host:port``, optionally ``ray://host:port``) opens within ``timeout`` seconds.
    Ray's own connect retries for minutes on an address where nothing listens."""
    hp = address.split("://", 1)[-1]
    host, _, port = hp.rpartition(":")
    if not host or not port.isdigit():
        raise RtamtClusterError(f"cluster address {address!r}: expected 'host:port' "
                                "(the head node's GCS address, printed by `ray start --head`)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise RtamtClusterError(
            f"no Ray cluster answers at {address!r}: a TCP connection did not open within "
            f"{timeout:g} s ({e}); start one with `ray start --head` and pass the address "
            "it prints") from None


class InProcessTransport:
    """Hosts in this process, each served by one thread (messages to a worker run in
    order).  ``kill`` closes a host and makes its later replies :class:`WorkerLost`."""

    def __init__(self):
        self._pools: dict[int, cf.ThreadPoolExecutor] = {}
        self._dead: set[int] = set()

    def start_worker(self, threads: int, host_kw: dict, node=None):
        h = StreamHost(threads=threads, **host_kw)
        self._pools[id(h)] = cf.ThreadPoolExecutor(1, thread_name_prefix="rtamt-host")
        return h

    def call(self, worker, method: str, *args):
        if id(worker) in self._dead:
            f = cf.Future()
            f.set_exception(WorkerLost("worker killed"))
            return f
        return self._pools[id(worker)].submit(getattr(worker, method), *args)

    def get(self, futures: dict, timeout: float) -> tuple[dict, set]:
        """``({key: reply}, {keys whose worker died})``; raises
        :class:`RtamtClusterError` when a live worker does not answer within
        ``timeout`` seconds, and re-raises a worker's own error."""
        values, lost = {}, set()
        for k, f in futures.items():
            try:
                values[k] = f.result(timeout)
            except WorkerLost:
                lost.add(k)
            except cf.TimeoutError:
                raise RtamtClusterError(f"worker {k} did not answer within {timeout:g} s") \
                    from None
        return values, lost

    def kill(self, worker) -> None:
        self._dead.add(id(worker))
        worker.shutdown()

    def stop_worker(self, worker) -> None:
        if id(worker) not in self._dead:
            self._dead.add(id(worker))
            worker.shutdown()
        self._pools.pop(id(worker)).shutdown(wait=False)

    def shutdown(self) -> None:
        for w in list(self._pools):
            self._pools.pop(w).shutdown(wait=False)


class RayTransport:
    """One Ray actor per worker (``num_cpus=threads``; pinned to ``node`` when given),
    each a :class:`~rtamt.cluster.host.StreamHost` in its own process; actors are not
    restarted by Ray: the client restores their streams elsewhere."""

    def __init__(self):
        import ray  # the extra: pip install 'rtamt[cluster]'
        self.ray = ray
        self._cls = ray.remote(StreamHost)
        self._pids: dict = {}

    def start_worker(self, threads: int, host_kw: dict, node=None):
        opts = dict(num_cpus=threads, max_restarts=0, max_task_retries=0)
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        return self._cls.options(**opts).remote(threads=threads, **host_kw)

    def call(self, worker, method: str, *args):
        return getattr(worker, method).remote(*args)

    def get(self, futures: dict, timeout: float) -> tuple[dict, set]:
        ray = self.ray
        values, lost = {}, set()
        for k, f in futures.items():
            try:
                values[k] = ray.get(f, timeout=timeout)
            except ray.exceptions.RayActorError:
                lost.add(k)
            except ray.exceptions.GetTimeoutError:
                raise RtamtClusterError(f"worker {k} did not answer within {timeout:g} s") \
                    from None
            except ray.exceptions.RayTaskError as e:
                raise e.as_instanceof_cause() from None
        return values, lost

    def kill(self, worker) -> None:
        """SIGKILL the worker's process (it must run on this machine)."""
        pid = self.ray.get(worker.pid.remote(), timeout=30)
        os.kill(pid, signal.SIGKILL)

    def stop_worker(self, worker) -> None:
        try:
            self.ray.get(worker.shutdown.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a dead or stuck worker is killed anyway
            pass
        self.ray.kill(worker, no_restart=True)

    def shutdown(self) -> None:
        pass
