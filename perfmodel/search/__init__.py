"""Plan search: every layout of a job (`space`, `layouts`), per-operator sharding for one mesh (`pase`), and the
split of layers into pipeline stages (`stages`)."""
