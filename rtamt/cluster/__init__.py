"""Live streams on a Ray cluster: placed by capacity, carried in batches, moved and
recovered by snapshot, bit for bit (docs/cluster.md).

``Cluster(address)`` (or ``Cluster.local(workers=N)``) starts one worker per node (or per
group of cores), each a process owning an rtamt :class:`~rtamt.scheduler.Scheduler`;
``cluster.open(model, fs, block, budget_ms=..., name=...)`` returns a
:class:`RemoteStream` with the local stream's API.  Ray is an extra
(``pip install 'rtamt[cluster]'``), imported only when a cluster is made: neither
``import rtamt`` nor ``import rtamt.cluster`` imports it.

=====================================  ===========================================
:mod:`~rtamt.cluster.client`           ``Cluster``, ``RemoteStream``: placement,
                                       batched transport, move, drain, recovery
:mod:`~rtamt.cluster.host`             ``StreamHost``: a worker's scheduler and
                                       its side of each message
:mod:`~rtamt.cluster.transport`        Ray actors (or threads in this process)
=====================================  ===========================================
"""
from .client import Cluster, ClusterStreamStats, Recovery, RemoteStream, Worker
from .host import StreamHost
from .transport import RtamtClusterError, WorkerLost

__all__ = ["Cluster", "RemoteStream", "Recovery", "ClusterStreamStats", "Worker",
           "StreamHost", "RtamtClusterError", "WorkerLost"]
