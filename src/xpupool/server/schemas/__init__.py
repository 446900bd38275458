"""The API's wire types, one module per resource, shared by the server, the CLI client and the
node agent:

- ``base``: the name rule and the strict (request) and lenient (response, report) bases;
- ``agent_protocol``: what a node agent sends and receives (registration, heartbeats, replica
  reports and states, work handed to it); the only module the agent imports;
- ``tenants``: tenants, their limits and tokens; ``audit``: the audit trail's rows;
- ``queues``: queues and quotas; ``jobs``: jobs, their phases and causes; ``models``: catalog
  models and plans;
- ``nodes``: nodes, taints and sites; ``devices``: cards and accelerator models; ``overview``: the
  fleet's overview and history.

Importable with only pydantic and ``xpupool.model`` (the CLI must not pull in FastAPI or
SQLAlchemy). This package re-exports nothing: import each type from its module, so that importing
the agent protocol does not load the rest.
"""
