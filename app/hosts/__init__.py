"""Host clusters: the GPU Kubernetes clusters the portal manages, as a managed resource."""
