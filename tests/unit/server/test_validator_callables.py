"""Every field validator of the API's and the agent protocol's models is a plain function, never a
class. Pydantic reads a validator's signature to decide how to call it, and a class's call
signature is Python's to define: an enum used as ``AfterValidator(ReplicaState)`` reads as
``(value, names=None, ...)`` on Python 3.11 and as ``(*values)`` on 3.12, where Pydantic refuses it
while the module is imported (seen on the lent GPU host, Python 3.12.3 and Pydantic 2.14:
``xpupool up`` and every client command that builds a job failed with "Unrecognized field validator
function signature for <enum 'ReplicaState'>"; docs/hardware-validation.md). This machine's Python
accepts the class, so the rule is checked here instead of the import failing."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator

from pydantic import BaseModel
from pydantic.functional_validators import (
    AfterValidator,
    BeforeValidator,
    PlainValidator,
    WrapValidator,
)

import xpupool

VALIDATORS = (AfterValidator, BeforeValidator, PlainValidator, WrapValidator)


def _models() -> Iterator[type[BaseModel]]:
    for info in pkgutil.walk_packages(xpupool.__path__, "xpupool."):
        if ".schemas" not in info.name and not info.name.endswith("sites_file"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseModel) and value is not BaseModel:
                yield value


def test_no_field_validator_is_a_class() -> None:
    found = []
    seen = 0
    for model in _models():
        for name, field in model.model_fields.items():
            for meta in field.metadata:
                if isinstance(meta, VALIDATORS):
                    seen += 1
                    if inspect.isclass(meta.func):
                        found.append(f"{model.__module__}.{model.__name__}.{name}: {meta.func}")
    assert seen > 0, "no field validator found: the walk looks in the wrong place"
    assert found == []
