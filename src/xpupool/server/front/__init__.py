"""The service proxy's own process (``xpupool up --proxy-port``): a forwarder beside the plane,
so that proxied requests never wait for a scheduling pass, and the channel it polls the plane on.
"""
