"""The formats the Kubernetes front reads and writes on cluster objects, and nothing that talks to
a cluster: HAMi's node registration and pod assignment annotations and its node lock, xpupool's
own node annotations, the extended resource names and quantities a pod asks in, and how a pod's
containers (init, sidecar, app) charge its cards. Kept apart so that the informers, the extender,
the node agent and the benchmarks decode and encode one way, and so each format can be checked
against the Go source it was written from without a cluster or an engine.
"""
