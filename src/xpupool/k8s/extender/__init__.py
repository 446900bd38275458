"""The kube-scheduler extender: its four verbs (``verbs``: filter, prioritize, bind, preempt) over
the cluster view, placing a pod's containers (``pod_placement``), gangs, preemption of card
shares and image needs, the extender wire format (``wire``, read by ``args``) and HTTP face, the
API calls a bind and an eviction make, the learner, and ``main``, the process ``xpupool k8s
extender`` runs. It sits on ``k8s.informers`` and ``k8s.codec``; nothing below imports it.
"""
