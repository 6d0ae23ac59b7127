"""`portal lab`: a real GPU host on this machine, with the portal on it (not a domain)."""
