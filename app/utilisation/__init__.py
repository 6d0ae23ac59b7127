"""GPU utilisation from the NVIDIA DCGM exporter, read from the operator's Prometheus and mapped
to tenants and clusters: now, over a day, and the GPUs bound but idle past a window."""
