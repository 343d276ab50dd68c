"""``strandline bench``: load generators in the manner of Kafka's ``kafka-producer-perf-test`` and
``kafka-consumer-perf-test``, spread over several processes so that the client is not what is
measured."""
