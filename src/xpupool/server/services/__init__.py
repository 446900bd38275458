"""What the API does, one module per group; routers only parse, authorize and call these."""
