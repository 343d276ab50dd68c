"""Differential tests: the same requests sent to Apache Kafka 3.9 and to Strandline, the answers compared."""
