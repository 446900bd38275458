"""HTTP workers in front of the plane: processes that take the API's connections, so that the
plane's one interpreter spends its time on the pool, not on HTTP (``xpupool up --http-workers``).
"""
