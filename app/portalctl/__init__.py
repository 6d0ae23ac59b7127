"""portalctl: the portal's command-line client, over the REST API only."""
