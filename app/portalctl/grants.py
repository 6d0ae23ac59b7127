"""The amount of a quota request, an approval or a cluster, in one of three units: whole GPUs,
slices of a MIG profile, or a share of one GPU (the API's ``gpus``, ``slices`` with
``mig_profile``, ``gpu_share``); and the columns that say it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

# At the end of every table of grants, after the columns whole GPUs always had.
UNIT_COLUMNS = ("grant", "unit", "mig_profile", "amount")

Gpus = Annotated[int | None, typer.Option(help="whole GPUs")]
Slices = Annotated[int | None, typer.Option(help="MIG slices of --mig-profile, instead of GPUs")]
MigProfile = Annotated[str | None, typer.Option(help="the MIG profile of --slices, e.g. 1g.10gb")]
GpuShare = Annotated[str | None, typer.Option(
    help="a share of one GPU instead of GPUs, e.g. 0.5 (in the class's steps)")]


def grant_fields(gpus: int | None, slices: int | None, mig_profile: str | None,
                 gpu_share: str | None) -> dict[str, Any]:
    """The fields given, as the API names them; the API refuses a mix in words."""
    given = {"gpus": gpus, "slices": slices, "mig_profile": mig_profile, "gpu_share": gpu_share}
    return {name: value for name, value in given.items() if value is not None}
