"""The Kubernetes node agent, the DaemonSet's one process: it probes the node's devices, keeps them
and a heartbeat in the Node's ``xpupool.io/devices`` annotations (``agent``) and, when asked, in
HAMi's registration annotations too (``hami_register``), so HAMi's scheduler sees the same cards.
It shares the probes and monitor with the pool agent and the formats of ``k8s.codec``; the
extender reads what it writes only through the API server.
"""
