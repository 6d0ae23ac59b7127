"""Shapes of bare-metal machines on the API and in forms. BMC credentials only ever come in."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.kit.validation import SingleLine, Visible, dns_label_problem
from app.machines.bmc import MAX_BMC_ADDRESS, bmc_address_problem, normalized_mac
from app.nodes.schemas import Condition

MAX_MACHINE_NAME = 63
Phase = Literal["registering", "inspecting", "available", "provisioning", "joined",
                "deprovisioning", "failed"]
Desired = Literal["pool", "provisioned", "private"]


class BmcCredentialsIn(BaseModel):
    """The BMC's user and password: sealed on arrival, never shown again."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    username: Visible = Field(min_length=1, max_length=255, repr=False)
    password: Visible = Field(min_length=1, max_length=1024, repr=False)

    @field_validator("username", "password")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("one line of printable characters")
        return value


class MachineRegister(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: Visible = Field(max_length=200, examples=["gpu-r4-07"],
                      description="a DNS-1123 label: the BareMetalHost's and the Node's name")
    host_cluster: Visible = Field(max_length=63, examples=["default"],
                              description="the host cluster the machine joins")
    bmc_address: SingleLine = Field(max_length=MAX_BMC_ADDRESS,
                                    examples=["redfish+https://10.0.4.7/redfish/v1/Systems/1"],
                                    description="the BMC's address with its Metal3 driver "
                                                "scheme (ipmi://, redfish://, "
                                                "redfish-virtualmedia://, idrac-virtualmedia://, "
                                                "…)")
    bmc: BmcCredentialsIn
    boot_mac: Visible = Field(max_length=17, examples=["0c:c4:7a:12:34:56"],
                          description="the MAC address of the NIC the machine boots from")
    gpu_class: Visible = Field(max_length=200, examples=["NVIDIA-H100-80GB-HBM3"],
                           description="the GPU class (product) the machine is expected to have")
    gpu_count: int = Field(ge=0, le=64, description="GPUs the machine is expected to have")
    rack: SingleLine = Field(default="", max_length=63)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = dns_label_problem(value, MAX_MACHINE_NAME)
        if problem:
            raise ValueError(f"the name is {problem}" if problem == "required" else problem)
        if _uuid_shaped(value):
            raise ValueError("a UUID-shaped name: Metal3 refuses those for a BareMetalHost")
        return value

    @field_validator("bmc_address")
    @classmethod
    def _bmc_address(cls, value: str) -> str:
        problem = bmc_address_problem(value.strip())
        if problem:
            raise ValueError(problem if problem == "required" else f"the BMC address {problem}")
        return value.strip()

    @field_validator("boot_mac")
    @classmethod
    def _boot_mac(cls, value: str) -> str:
        mac = normalized_mac(value)
        if mac is None:
            raise ValueError("a MAC address: six hex octets, e.g. 0c:c4:7a:12:34:56")
        return mac


def _uuid_shaped(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class MachineOut(BaseModel):
    id: int
    name: str
    host_cluster: str
    bmc_address: str
    bmc_credentials_set_at: datetime = Field(description="the credentials themselves never "
                                                         "come out")
    boot_mac: str
    gpu_class: str
    gpu_count: int
    rack: str
    desired: Desired = Field(description="pool: registered, inspected, no image; "
                                         "provisioned: imaged and joined as a Node of its "
                                         "host; private: imaged and joined as a Node of "
                                         "the private-nodes cluster it serves")
    deleting: bool
    phase: Phase
    reason: str = Field(description="Metal3's error message when failed, what the machine "
                                    "waits for, or how a joined machine's node differs from "
                                    "the GPUs expected")
    provisioning_state: str = Field(description="Metal3's provisioning state as last read")
    node_name: str | None
    tenant: str | None = Field(description="the tenant the machine's node is dedicated to, "
                                           "or whose private-nodes cluster it serves")
    cluster: str | None = Field(default=None,
                                description="the private-nodes cluster the machine serves "
                                            "(or is on its way back to the pool from)")
    assigned_at: datetime | None = None
    generation: int
    observed_generation: int
    conditions: list[Condition]
    created_at: datetime
    updated_at: datetime
