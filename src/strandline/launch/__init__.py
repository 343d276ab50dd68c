"""Clusters of processes on this machine, for everything that starts one: ``strandline up``
(:mod:`~strandline.launch.up`), the lab, the Apache Kafka reference cluster, the tests and the
benchmarks.

Every process is started in a session of its own with a signal for when its parent dies
(:mod:`~strandline.launch.process`), waited for under a deadline (:mod:`~strandline.launch.wait`:
a printed line, every broker's knowing all the others), and stopped by its PID: SIGTERM, then
SIGKILL after a deadline. :mod:`~strandline.launch.brokers` is a Strandline broker's process and
files, :mod:`~strandline.launch.zookeeper` the embedded ZooKeeper, :mod:`~strandline.launch.ports`
free loopback ports, :mod:`~strandline.launch.foreground` a cluster run in the foreground (data
directory lock, signals, supervision).
"""
