"""The web console: a live page of the cluster, merged from every broker's /status."""
