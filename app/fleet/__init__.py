"""The fleet across host clusters: capacity per host, region and GPU class (platform admins)."""
