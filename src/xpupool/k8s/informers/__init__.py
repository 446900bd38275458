"""How the Kubernetes front keeps up with kube-apiserver: the lightkube client and kubeconfig, the
informers that list and watch Nodes, Pods and ResourceQuotas and deliver each change once, the
leader election Lease, and the cluster view that turns those objects (through ``decoders``) into
one engine's nodes and charges. Everything here is read-side: what the extender decides is in
``k8s.extender``, which builds on this package and is never imported by it.
"""
