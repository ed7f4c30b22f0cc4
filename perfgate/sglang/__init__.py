"""What perfgate knows of SGLang without importing it: each release's flags, endpoints,
`meta_info` keys and counters (`facts`), checked against the releases' own source, and the
version ranges they hold for (`versions`)."""
