"""What the portal reads from the operator's monitoring: the Prometheus HTTP API."""
