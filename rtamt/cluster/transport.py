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
import time

from .host import StreamHost

__all__ = ["MAX_INFLIGHT", "HOST_THREADS", "RtamtClusterError", "WorkerLost",
           "InProcessTransport", "RayTransport", "check_reachable", "no_delay"]


#: step messages the client keeps in flight per worker: the next step's input is pushed
#: while the last step waits for its blocks (:meth:`StreamHost.step` keeps their order)
MAX_INFLIGHT = 2

#: an in-process worker's threads serving messages: the steps in flight and one control
#: call (load, stats) that then does not wait for them
HOST_THREADS = MAX_INFLIGHT + 1


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
    """Hosts in this process, each served by ``HOST_THREADS`` threads (as a Ray actor).
    ``kill`` closes a host and makes its later replies :class:`WorkerLost`."""

    def __init__(self):
        self._pools: dict[int, cf.ThreadPoolExecutor] = {}
        self._dead: set[int] = set()

    def start_worker(self, threads: int, host_kw: dict, node=None):
        h = StreamHost(threads=threads, **host_kw)
        self._pools[id(h)] = cf.ThreadPoolExecutor(HOST_THREADS, thread_name_prefix="rtamt-host")
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


def no_delay(conn):
    """Set ``TCP_NODELAY`` on a ``multiprocessing.connection`` socket: it writes a large
    message as header and body, and Nagle's algorithm held the body until the peer's
    delayed ACK, 40 ms later (RFC 1122 4.2.3.2, RFC 896); returns ``conn``."""
    s = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        s.close()
    return conn


class _StepReply:
    """A step message sent on a worker's direct connection: its reply is the next one
    that connection receives (the collector takes the replies in order)."""
    __slots__ = ("conn",)

    def __init__(self, conn):
        self.conn = conn


class RayTransport:
    """One Ray actor per worker (``num_cpus=threads``; pinned to ``node`` when given),
    each a :class:`~rtamt.cluster.host.StreamHost` in its own process; actors are not
    restarted by Ray: the client restores their streams elsewhere.

    Control calls (open, detach, snapshot, stats, load) are Ray actor calls.  The step
    messages, one per worker and block period, go on a direct TCP connection to the
    worker (:meth:`StreamHost.serve`: ``multiprocessing.connection`` with a random
    ``authkey``), opened when the worker starts, so that a message costs no Ray task
    in the worker and no Ray call in the client (what that saves: docs/cluster.md,
    "Measured").  A worker whose process dies closes its connection: the next
    reply is reported lost at once."""

    def __init__(self):
        import ray  # the extra: pip install 'rtamt[cluster]'
        self.ray = ray
        self._cls = ray.remote(StreamHost)
        self._links: dict = {}          # actor id: [serve() reference, connection]
        self._key = os.urandom(32)

    def start_worker(self, threads: int, host_kw: dict, node=None):
        opts = dict(num_cpus=threads, max_restarts=0, max_task_retries=0)
        ip = "127.0.0.1"
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            ip = next((n["NodeManagerAddress"] for n in self.ray.nodes()
                       if n["NodeID"] == node), ip)
        w = self._cls.options(**opts).remote(threads=threads, **host_kw)
        self._links[w._actor_id] = [w.serve.remote(self._key, ip), None]
        return w

    def _conn(self, worker, timeout: float = 60.0):
        """The worker's data connection (opened on first use, once its actor serves)."""
        link = self._links[worker._actor_id]
        if link[1] is None:
            from multiprocessing.connection import Client
            addr = self.ray.get(link[0], timeout=timeout)
            link[1] = no_delay(Client(tuple(addr), authkey=self._key))
        return link[1]

    def call(self, worker, method: str, *args):
        if method == "step":
            batch, timeout = args[0], args[1]
            try:
                conn = self._conn(worker)
                conn.send((timeout, batch))
            except (OSError, EOFError, self.ray.exceptions.RayActorError):
                return _StepReply(None)        # its reply: lost
            return _StepReply(conn)
        return getattr(worker, method).remote(*args)

    def get(self, futures: dict, timeout: float) -> tuple[dict, set]:
        """``({key: reply}, {keys whose worker died})``; a worker that does not answer
        within ``timeout`` seconds raises :class:`RtamtClusterError`, a worker's own error
        is re-raised, each after every other reply was read (a step reply left unread
        would be taken as the next message's)."""
        ray = self.ray
        values, lost, err = {}, set(), None
        end = time.monotonic() + timeout
        for k, f in futures.items():
            left = max(end - time.monotonic(), 0.0)
            if isinstance(f, _StepReply):
                try:
                    if f.conn is None:
                        raise EOFError
                    if not f.conn.poll(left):
                        err = err or RtamtClusterError(
                            f"worker {k} did not answer within {timeout:g} s")
                        continue
                    tag, v = f.conn.recv()
                except (EOFError, OSError):
                    lost.add(k)
                    continue
                if tag == "error":
                    err = err or v
                else:
                    values[k] = v
                continue
            try:
                values[k] = ray.get(f, timeout=left)
            except ray.exceptions.RayActorError:
                lost.add(k)
            except ray.exceptions.GetTimeoutError:
                err = err or RtamtClusterError(f"worker {k} did not answer within "
                                               f"{timeout:g} s")
            except ray.exceptions.RayTaskError as e:
                err = err or e.as_instanceof_cause()
        if err is not None:
            raise err
        return values, lost

    def kill(self, worker) -> None:
        """SIGKILL the worker's process (it must run on this machine)."""
        pid = self.ray.get(worker.pid.remote(), timeout=30)
        os.kill(pid, signal.SIGKILL)

    def stop_worker(self, worker) -> None:
        link = self._links.pop(worker._actor_id, None)
        if link is not None and link[1] is not None:
            link[1].close()
        try:
            self.ray.get(worker.shutdown.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - a dead or stuck worker is killed anyway
            pass
        self.ray.kill(worker, no_restart=True)

    def shutdown(self) -> None:
        for link in self._links.values():
            if link[1] is not None:
                link[1].close()
        self._links.clear()
