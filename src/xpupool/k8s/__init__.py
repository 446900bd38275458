"""The Kubernetes front: kube-scheduler extender wire format, HAMi annotation codecs, pod requests."""
