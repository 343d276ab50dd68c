"""Load generators for real clusters, all on confluent-kafka (librdkafka) and sharing how a
producer is configured, paced, handed a record and told of it (:mod:`~strandline.load.producer`):

* ``strandline bench produce|consume`` (:mod:`~strandline.load.produce`,
  :mod:`~strandline.load.consume`): in the manner of Kafka's ``kafka-producer-perf-test`` and
  ``kafka-consumer-perf-test``, spread over several processes (:mod:`~strandline.load.workers`) so
  that the client is not what is measured, with Kafka's lines (:mod:`~strandline.load.stats`);
* :mod:`~strandline.load.history`: producers that record every record as an operation of a
  history (invoke, then ok, fail or unknown), which the lab checks after its faults.

The simulator's clients (``strandline.sim.workload``) are not here: they speak the protocol to
simulated brokers themselves, under the simulated clock, without I/O.
"""
