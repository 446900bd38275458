"""The embedded control plane: REST API, durable state, auth and the scheduling loop."""
