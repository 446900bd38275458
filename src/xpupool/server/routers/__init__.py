"""Thin routers: parse, authorize through a dependency, call a service, return a schema."""
