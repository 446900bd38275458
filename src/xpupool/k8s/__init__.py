"""The Kubernetes front: scheduler extender, cluster view, HAMi codecs and the node agent."""
