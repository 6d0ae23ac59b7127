"""An admission webhook's answer applied as the API server applies it: its JSONPatch (RFC 6902
``add`` and ``replace``, the two the portal's webhook writes) on a copy of the object."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any


def patched(obj: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` after the patch of an allowed admission ``response``."""
    assert response["allowed"], response
    result: dict[str, Any] = json.loads(json.dumps(obj))
    for op in json.loads(base64.b64decode(response.get("patch") or b"W10=")):
        *parents, last = [t.replace("~1", "/").replace("~0", "~")
                          for t in op["path"].split("/")[1:]]
        target: Any = result
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if last == "-":
            target.append(op["value"])
        elif isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in target, op
            target[last] = op["value"]
    return result
