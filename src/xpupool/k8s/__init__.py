"""The Kubernetes front, in four floors, each importing only those below it: ``codec`` (what
HAMi, kube-apiserver and the node agent write on Nodes and Pods, read and written exactly),
``informers`` (the API server's objects kept in step, and the cluster view the engine decides on),
``extender`` (kube-scheduler's four verbs, their HTTP face and the process that serves them) and
``node_agent`` (the DaemonSet that probes a node's devices and annotates its Node), with ``site``
beside the extender (the cluster as a site of the control plane: ``xpupool up --sites``). ``cli``
holds the ``xpupool k8s`` commands that start the two processes.
"""
