"""`pyd4j plan --devices FILE`: the device profiles file, validated before the cost model uses it."""

from __future__ import annotations

import click

from pyd4j import inputs


# a device --devices adds (not one it changes) needs these
NEW_DEVICE_FIELDS = ("name", "memory_bytes", "tflops", "mem_gbps", "link_gbps")


def device_profiles(path: str) -> dict:
    """The --devices file validated (pyd4j.schemas.DevicesDocument: numbers, ranges, known fields) before
    the cost model divides by any of it; BadParameter naming the file and the field."""
    from pyd4j.schemas import SchemaError, check  # noqa: PLC0415
    from pyd4j.sched.costmodel import default_doc  # noqa: PLC0415

    doc = inputs.read_json(path, "device profiles")
    fix = "write it in the format of pyd4j/sched/devices.json (measured numbers: tflops > 0, memory_bytes in bytes)"
    try:
        check("devices", doc, f"device profiles {path!r}", fix)
    except SchemaError as err:
        raise click.BadParameter(str(err), param_hint="--devices") from None
    known = default_doc()["devices"]
    for key, entry in doc.get("devices", {}).items():
        missing = [f for f in NEW_DEVICE_FIELDS if key not in known and entry.get(f) is None]
        if missing:
            raise click.BadParameter(f"device profiles {path!r}: device {key!r} is new (not one of {sorted(known)}) "
                                     f"and lacks {missing}; give them, or name a known device to change its numbers",
                                     param_hint="--devices")
    return doc
