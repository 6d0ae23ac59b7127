"""One accounting of a tenant's GPUs: approved quota, dedicated nodes and clusters
(``app.accounting.standing``; docs/operator.md, "Quota accounting")."""
