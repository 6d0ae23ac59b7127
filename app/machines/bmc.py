"""A machine's BMC address and boot MAC, checked as the baremetal-operator will read them.

The driver is the address's scheme, as Metal3's ``bmc.NewAccessDetails`` takes it: a driver
name, optionally ``+http`` or ``+https`` for those speaking HTTP. An address without a scheme
(which Metal3 reads as IPMI) is refused: the admin says which driver they mean.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# The drivers Metal3's hardwareutils registers, and whether each speaks HTTP (takes
# ``+http`` / ``+https``).
DRIVERS: dict[str, bool] = {
    "ipmi": False, "libvirt": False, "irmc": False,
    "ilo4": False, "ilo4-virtualmedia": False, "ilo5": False,
    "redfish": True, "redfish-virtualmedia": True, "ilo5-redfish": True,
    "ilo5-virtualmedia": True, "idrac-redfish": True, "idrac-virtualmedia": True,
}
MAX_BMC_ADDRESS = 500
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def bmc_address_problem(address: str) -> str | None:
    """Why Metal3 could not use ``address``, or None: "required", or what follows "the BMC
    address" in a sentence."""
    if not address:
        return "required"
    if any(c.isspace() for c in address):
        return "holds spaces"
    scheme, separator, _rest = address.partition("://")
    if not separator:
        return f"needs a driver scheme, e.g. {_EXAMPLES}"
    driver, plus, transport = scheme.partition("+")
    if driver not in DRIVERS:
        return (f"starts with {driver!r}, which is no BMC driver: the scheme names the driver, "
                f"e.g. {_EXAMPLES}; one of {', '.join(sorted(DRIVERS))}")
    if plus and (not DRIVERS[driver] or transport not in ("http", "https")):
        return f"uses driver {driver!r}, which takes no '+{transport}'"
    if "@" in _rest.split("/", 1)[0]:
        return ("must not carry a user or password: give them as the BMC credentials, which "
                "are stored encrypted")
    try:
        host = urlsplit(f"https://{_rest}").hostname
    except ValueError:
        host = None
    return None if host else "names no host"


_EXAMPLES = "ipmi://10.0.0.5 or redfish+https://10.0.0.5/redfish/v1/Systems/1"


def normalized_mac(value: str) -> str | None:
    """``value`` as lower-case colon-separated octets, or None when it is no MAC address."""
    candidate = value.strip().lower().replace("-", ":")
    return candidate if _MAC.match(candidate) else None
