"""GPU usage: the allocation ledger, live use samples, GPU-hour reports and their export.

Importing the package registers the ledger's session hooks: quotas, nodes and clusters stay
unaware that their changes are recorded.
"""

from app.usage import ledger as ledger
